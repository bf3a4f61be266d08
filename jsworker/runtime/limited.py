"""Jobs a limit holds back: a few wait in their slots, the others go back to the server.

A job of a task with a rate limit, or of a partition with a concurrency or rate limit, may not
be allowed to start when it arrives. Waiting in its worker slot it holds that slot for as long
as the limit keeps it, and a task offered more than its limit then fills every slot of every
worker with jobs that wait while every other queue stops (a 20/s task offered 40/s held all
300 slots of a fleet while 29,789 other jobs waited). So a worker keeps at most :func:`keep`
jobs of one limit waiting in slots, enough for the limit's next windows to find one ready, and
gives every other one back to the server at once: snoozed until about when its turn may come,
a delayed redelivery that spends no attempt (its record counts it among ``snoozes``, as a
task's own ``Snooze``). The limit stays exact: starts are counted on the server as before,
whichever worker the job comes back to.
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..flow.partitions import Lease, Partitions
from ..flow.rates import RateLimiter
from ..rates import Rate, partition_of
from .execution import JobRun
from .lifecycle import JobBook
from .settlement import Decision, Outcome, OutcomeKind

if TYPE_CHECKING:
    from prometheus_client import Counter as Metric

    from ..task import Task

T = TypeVar("T")

#: How the reason of a job held back by a limit begins (waiting in its slot or given back).
HELD_BACK = "held back by "
#: The longest a job a rate limit gave back waits before the server delivers it again
#: (seconds): the rate says how long a backlog takes.
LONGEST_GIVE_BACK = 30.0
# A job of a partition's concurrency limit given back first waits this long, doubled with each
# delivery up to _PARTITION_LONGEST: how long the partition stays busy is the task's to say,
# and a partition that frees up must not wait long for its next job.
_PARTITION_GIVE_BACK, _PARTITION_LONGEST = 0.5, 5.0


def keep(rate: Rate | None) -> int:
    """How many jobs of one limit a worker keeps waiting in slots: two windows' worth of a
    rate's starts (so the next windows find jobs ready whatever the other workers hold), one
    for a partition's concurrency."""
    return 1 if rate is None else 2 * rate.burst


def give_back_delay(job: JobRun, first: float, longest: float = LONGEST_GIVE_BACK) -> float:
    """Seconds ``job`` waits for its next delivery once given back: ``first`` for its first
    delivery, doubled with each later one (a job given back again and again is seldom the
    next to start), up to ``longest``, spread by half either way."""
    base = min(longest, first * 2.0 ** min(job.attempt - 1, 16))
    return base * (0.5 + random.random())


async def held_back(book: JobBook, job: JobRun, reason: str, limit: Awaitable[T]) -> T:
    """Wait for ``limit`` with ``job`` counted as held back for ``reason`` meanwhile (a status
    tells it queued, with the reason); what it gives."""
    book.held_back[job] = reason
    try:
        return await limit
    finally:
        del book.held_back[job]


class _GivenBack(Exception):
    """Raised inside a gate's turn: the job goes back to the server for ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__(delay)
        self.delay = delay


class Holding:
    """How many jobs of each limit wait in this worker's slots, and what the next one does."""

    def __init__(self, book: JobBook) -> None:
        self._book = book
        self._waiting: Counter[str] = Counter()

    async def wait_or_give_back(
        self,
        job: JobRun,
        limit: str,
        reason: str,
        room: int,
        wait: Callable[[], Awaitable[T]],
        give_back: Callable[[], float],
    ) -> T:
        """Await ``wait()`` in ``job``'s slot (counted as held back for ``reason``) while
        fewer than ``room`` jobs of ``limit`` wait in this worker; else raise
        :class:`_GivenBack` with the delay ``give_back()`` says (it counts the job held)."""
        if self._waiting[limit] >= room:
            raise _GivenBack(give_back())
        self._waiting[limit] += 1
        try:
            return await held_back(self._book, job, reason, wait())
        finally:
            self._waiting[limit] -= 1


async def _gated(turn: Awaitable[Any], reason: str) -> Outcome | None:
    """The gate's verdict once ``turn`` is over: None to start, or the job given back."""
    try:
        await turn
    except _GivenBack as back:
        return Outcome(OutcomeKind.SNOOZED, reason, retry_delay=back.delay)
    return None


def task_rate_gate(
    holding: Holding, limits: dict[str, RateLimiter], job: JobRun
) -> Awaitable[Outcome | None] | None:
    """The gate of tasks with a rate limit: a start in hand lets the job go at once; else it
    asks the server for one, and waits for it in its slot or is given back."""
    limiter = limits.get(job.task_name) if job.task is not None else None
    if limiter is None or limiter.in_hand():
        return None
    reason = f"{HELD_BACK}the rate limit of task {job.task_name}"
    return _gated(_rate_turn(holding, job, limiter, reason), reason)


async def _rate_turn(holding: Holding, job: JobRun, limiter: RateLimiter, reason: str) -> None:
    if await limiter.take():
        return
    await holding.wait_or_give_back(
        job, limiter.scope, reason, keep(limiter.rate), limiter.acquire, _rate_give_back(job, limiter)
    )


def _rate_give_back(job: JobRun, limiter: RateLimiter) -> Callable[[], float]:
    """How long ``job`` waits once given back by ``limiter`` (counted as held meanwhile; one
    that waits in its slot is counted by the limiter): at first about as long as the starts
    a worker keeps in hand take."""

    def delay() -> float:
        limiter.held()
        rate = limiter.rate
        return give_back_delay(job, max(rate.window, keep(rate) * rate.period / rate.count))

    return delay


def partition_gate(
    holding: Holding, parts: Partitions, rate_held: Metric, job: JobRun
) -> Outcome | Awaitable[Outcome | None] | None:
    """The gate of tasks with per-partition limits: the job's partition, then its turn under
    the partition's rate and one of its leases (a few wait in their slots, the others are
    given back)."""
    task = job.task
    if task is None or task.partition_key is None or not partition_limited(task):
        return None
    try:
        key = partition_of(task.partition_key, task.signature, job.args, job.kwargs)
    except ValueError as exc:
        return Outcome(OutcomeKind.BAD_INPUT, str(exc), error=exc)
    reason = f"{HELD_BACK}the partition limits of task {task.name}"
    return _gated(_partition_turn(holding, parts, rate_held, job, key, reason), reason)


def partition_limited(task: Task[Any, Any]) -> bool:
    """Whether ``task`` has a limit per partition (concurrency or rate)."""
    return task.partition_key is not None and (
        task.max_running_per_partition is not None or task.rate_limit_per_partition is not None
    )


async def _partition_turn(
    holding: Holding, parts: Partitions, rate_held: Metric, job: JobRun, key: str, reason: str
) -> None:
    task = job.task
    assert task is not None
    rate, size = task.rate_limit_per_partition, task.max_running_per_partition
    if rate is not None:
        limiter = parts.rate(task.name, key, rate, rate_held.labels(f"p-{task.name}").inc)
        if not limiter.in_hand() and not await limiter.take():
            room = keep(rate)
            await holding.wait_or_give_back(
                job, limiter.scope, reason, room, limiter.acquire, _rate_give_back(job, limiter)
            )
    if size is not None:
        lease: Lease | None = await parts.try_lease(task.name, key, size)
        if lease is None:

            def delay() -> float:
                parts.held(task.name)
                return give_back_delay(job, _PARTITION_GIVE_BACK, _PARTITION_LONGEST)

            lease = await holding.wait_or_give_back(
                job,
                f"l-{task.name}-{key}",
                reason,
                keep(None),
                functools.partial(parts.lease, task.name, key, size),
                delay,
            )
        job.lease = lease


async def release_lease(
    parts: Partitions, job: JobRun, outcome: Outcome, decision: Decision, duration: float
) -> None:
    """Give back the partition lease of a job that settled."""
    if job.lease is not None:
        lease, job.lease = job.lease, None
        await parts.release(lease)
