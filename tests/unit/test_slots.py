"""How the worker's slots start jobs: those that take free slots in one turn of the event
loop share the task started for the first, and none waits on what another waits for."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import anyio
import pytest

from jsworker._runtime.execution import JobRun
from jsworker._runtime.limiter import Limiter
from jsworker._runtime.outcomes import ACK, Outcome, OutcomeKind, Settlement
from jsworker._runtime.slots import Slots
from jsworker.jetstream.delivery import Delivery

from ..support import wait_until_async

pytestmark = pytest.mark.anyio


class _Verbs:
    async def publish(self, subject: str, payload: bytes) -> None:
        raise AssertionError("the stages here send nothing")

    def put(self, subject: str, payload: bytes) -> None:
        raise AssertionError("the stages here send nothing")


def _job(i: int) -> JobRun:
    return JobRun(Delivery(_Verbs(), "jobs", "", b"", None), f"j{i}", "t", "default", args=[i])


def _slots(
    limiter: Limiter[JobRun], run: Callable[[JobRun], Awaitable[Outcome]]
) -> tuple[Slots, list[tuple[int, asyncio.Task[None] | None]]]:
    """Slots whose run stage is ``run``, and the (job, task) of each job settled, in order."""
    settled: list[tuple[int, asyncio.Task[None] | None]] = []

    def settle(job: JobRun, outcome: Outcome) -> Settlement:
        settled.append((job.args[0], asyncio.current_task()))
        return Settlement(outcome, ACK)

    slots = Slots(limiter, {}, (lambda job: None, run, settle, lambda job, s: None), None)
    return slots, settled


async def _all_settled(
    limiter: Limiter[JobRun], settled: list[tuple[int, asyncio.Task[None] | None]], jobs: int
) -> None:
    """Wait until ``jobs`` jobs settled and the tasks that ran them ended: their slots are
    free then (a task gives its slot back as it ends)."""
    await wait_until_async(lambda: len(settled) >= jobs, timeout=5, message=f"{jobs} jobs to settle")
    with anyio.fail_after(5):
        await asyncio.gather(*{task for _, task in settled if task is not None})
    assert limiter.in_use == 0


def _start_in_one_turn(limiter: Limiter[JobRun], slots: Slots, jobs: list[JobRun]) -> None:
    # As the worker does for jobs that arrive while slots are free: a slot, then the start.
    for job in jobs:
        assert limiter.try_acquire()
        slots.start(job)


async def test_jobs_started_in_one_turn_run_in_order_in_the_first_ones_task() -> None:
    limiter: Limiter[JobRun] = Limiter(10)

    async def run(job: JobRun) -> Outcome:
        return Outcome(OutcomeKind.SUCCEEDED)

    slots, settled = _slots(limiter, run)
    jobs = [_job(i) for i in range(5)]
    _start_in_one_turn(limiter, slots, jobs)
    # Not started yet, and held with their slots: a worker counts them as buffered.
    assert slots.waiting() == tuple(jobs[1:])
    assert limiter.in_use == 5
    await _all_settled(limiter, settled, 5)
    assert [i for i, _ in settled] == [0, 1, 2, 3, 4]
    assert len({task for _, task in settled}) == 1
    assert slots.waiting() == () and slots.jobs == {}


async def test_a_job_that_waits_holds_up_none_started_with_it() -> None:
    """Job 0 waits for what job 1 does: job 1 must not wait for job 0's task."""
    limiter: Limiter[JobRun] = Limiter(10)
    done_by_1 = asyncio.Event()

    async def run(job: JobRun) -> Outcome:
        if job.args[0] == 0:
            await done_by_1.wait()
        elif job.args[0] == 1:
            done_by_1.set()
        return Outcome(OutcomeKind.SUCCEEDED)

    slots, settled = _slots(limiter, run)
    _start_in_one_turn(limiter, slots, [_job(i) for i in range(3)])
    await _all_settled(limiter, settled, 3)
    assert sorted(i for i, _ in settled) == [0, 1, 2]
    tasks = dict(settled)
    # Job 0's task waited; the others got tasks of their own, not job 0's.
    assert tasks[1] is not tasks[0] and tasks[2] is not tasks[0]


async def test_a_task_running_arrivals_goes_on_with_the_buffered_jobs_of_a_waiting_loop() -> None:
    """Two jobs arrive to the two free slots while five wait in a buffer, whose pull loop waits
    for a slot with a claim on them. The task running the arrivals gives each slot it frees to
    that loop's next job and runs it itself: all seven run in that one task, and the loop gets
    a slot only once its buffer is empty (no wake-up, no task per buffered job)."""
    limiter: Limiter[JobRun] = Limiter(2)

    async def run(job: JobRun) -> Outcome:
        return Outcome(OutcomeKind.SUCCEEDED)

    slots, settled = _slots(limiter, run)
    buffered = [_job(i) for i in range(2, 7)]
    emptied_when_woken: list[bool] = []

    async def pull_loop() -> None:
        await limiter.acquire(0, lambda: buffered.pop(0) if buffered else None)
        emptied_when_woken.append(not buffered)
        limiter.release()  # nothing left to take, as the worker's take() finds

    # The arrivals took the free slots; the buffer's loop then waits for one.
    assert limiter.try_acquire() and limiter.try_acquire()
    waiter = asyncio.ensure_future(pull_loop())
    await wait_until_async(lambda: bool(limiter._waiters), timeout=5, message="the loop waiting")
    slots.start(_job(0))
    slots.start(_job(1))
    with anyio.fail_after(5):
        await waiter
    await _all_settled(limiter, settled, 7)
    assert [i for i, _ in settled] == list(range(7))
    assert len({task for _, task in settled}) == 1
    assert emptied_when_woken == [True]
