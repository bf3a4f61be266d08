"""The concurrency limiter."""

from __future__ import annotations

import asyncio
import functools

import anyio
import anyio.lowlevel
import pytest

from jsworker._runtime.limiter import Limiter

from ..support import wait_until_async

pytestmark = pytest.mark.anyio


def test_limit_must_be_positive() -> None:
    """A limiter with fewer than one slot is refused."""
    with pytest.raises(ValueError):
        Limiter(0)


async def test_never_more_than_limit_acquired() -> None:
    """Many contenders never hold more than `limit` slots at once, and all get one eventually."""
    limiter: Limiter[None] = Limiter(3)
    peak = 0
    done = 0

    async def job() -> None:
        nonlocal peak, done
        await limiter.acquire()
        peak = max(peak, limiter.in_use)
        await anyio.sleep(0.001)
        limiter.release()
        done += 1

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            for _ in range(30):
                tg.start_soon(job)
    assert peak == 3
    assert done == 30
    assert limiter.in_use == 0


async def test_release_frees_a_waiter() -> None:
    """A waiter blocks while all slots are taken and gets the next released slot, which a
    later try_acquire cannot take from it."""
    limiter: Limiter[None] = Limiter(1)
    await limiter.acquire()
    got = anyio.Event()

    async def waiter() -> None:
        await limiter.acquire()
        got.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        for _ in range(10):
            await anyio.lowlevel.checkpoint()
        assert not got.is_set()
        assert limiter.in_use == 1
        limiter.release()
        assert not limiter.try_acquire()
        with anyio.fail_after(2):
            await got.wait()
    assert limiter.in_use == 1


async def test_try_acquire_takes_free_slots_only() -> None:
    """try_acquire takes a free slot and refuses once all are taken."""
    limiter: Limiter[None] = Limiter(2)
    assert limiter.try_acquire()
    assert limiter.try_acquire()
    assert not limiter.try_acquire()
    assert limiter.in_use == 2
    limiter.release()
    assert limiter.try_acquire()


async def test_cancelled_waiter_leaves_no_trace() -> None:
    """A waiter cancelled while waiting neither holds a slot nor blocks try_acquire."""
    limiter: Limiter[None] = Limiter(1)
    await limiter.acquire()
    with anyio.move_on_after(0.05):
        await limiter.acquire()
    limiter.release()
    assert limiter.in_use == 0
    assert limiter.try_acquire()


async def test_slot_handed_to_a_cancelled_waiter_is_passed_on() -> None:
    """A slot handed to a waiter that is cancelled before it runs goes back, not lost."""
    limiter: Limiter[None] = Limiter(1)
    await limiter.acquire()
    task = asyncio.ensure_future(limiter.acquire())
    await wait_until_async(
        lambda: len(limiter._waiters) == 1, timeout=5, message="the task to wait for a slot"
    )
    limiter.release()  # hands the slot to the waiting task ...
    task.cancel()  # ... which is cancelled before it resumes
    with pytest.raises(asyncio.CancelledError):
        await task
    assert limiter.in_use == 0
    assert limiter.try_acquire()


async def test_freed_slots_go_to_the_highest_priority_then_the_first_come() -> None:
    """Waiters of queues with a higher priority are served first; equals in arrival order."""
    limiter: Limiter[None] = Limiter(1)
    await limiter.acquire()
    served: list[str] = []

    async def waiter(name: str, priority: int) -> None:
        await limiter.acquire(priority)
        served.append(name)

    async with anyio.create_task_group() as tg:
        arrivals = (("low-1", 0), ("high-1", 10), ("low-2", 0), ("high-2", 10), ("mid", 5))
        for count, (name, priority) in enumerate(arrivals, 1):
            tg.start_soon(waiter, name, priority)
            # Each in line before the next comes, so that arrival order is known.
            await wait_until_async(
                functools.partial(lambda c: len(limiter._waiters) == c, count), timeout=2, message="in line"
            )
        for expected in range(1, 6):
            limiter.release()
            await wait_until_async(
                functools.partial(lambda e: len(served) == e, expected), timeout=2, message="a waiter served"
            )
    assert served == ["high-1", "high-2", "mid", "low-1", "low-2"]


async def test_a_holder_takes_on_the_first_waiter_s_work_and_keeps_its_slot() -> None:
    """hand_on gives the holder the work of the waiter first in line (by priority), through
    that waiter's claim; the slot stays taken and the waiter stays first. With nothing to
    claim, the slot goes to the waiter on release as always."""
    limiter: Limiter[str] = Limiter(1)
    await limiter.acquire()
    work = {"low": ["l1"], "high": ["h1", "h2"]}

    def claim(name: str) -> str | None:
        return work[name].pop(0) if work[name] else None

    served: list[str] = []

    async def waiter(name: str, priority: int) -> None:
        await limiter.acquire(priority, functools.partial(claim, name))
        served.append(name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter, "low", 0)
        await wait_until_async(lambda: len(limiter._waiters) == 1, timeout=2, message="low in line")
        tg.start_soon(waiter, "high", 10)
        await wait_until_async(lambda: len(limiter._waiters) == 2, timeout=2, message="high in line")
        assert [limiter.hand_on(), limiter.hand_on()] == ["h1", "h2"]
        assert limiter.in_use == 1 and len(limiter._waiters) == 2 and served == []
        # The first waiter has nothing left: its claim says so, and the slot goes to it.
        assert limiter.hand_on() is None
        limiter.release()
        await wait_until_async(lambda: served == ["high"], timeout=2, message="high served")
        assert limiter.hand_on() == "l1"
        limiter.release()
        await wait_until_async(lambda: served == ["high", "low"], timeout=2, message="low served")
    limiter.release()
    assert limiter.in_use == 0


async def test_nothing_is_handed_on_past_a_waiter_without_a_claim_or_a_cancelled_one() -> None:
    """A waiter without a claim is not skipped for one behind it; a cancelled one is."""
    limiter: Limiter[str] = Limiter(1)
    await limiter.acquire()
    plain = asyncio.ensure_future(limiter.acquire(5))
    await wait_until_async(lambda: len(limiter._waiters) == 1, timeout=2, message="in line")
    claiming = asyncio.ensure_future(limiter.acquire(0, lambda: "work"))
    await wait_until_async(lambda: len(limiter._waiters) == 2, timeout=2, message="in line")
    assert limiter.hand_on() is None
    # Cancelling the task cancels what it waits on at once; its entry leaves the heap only
    # when the task runs again. Passed over meanwhile:
    plain.cancel()
    assert limiter.hand_on() == "work"
    with pytest.raises(asyncio.CancelledError):
        await plain
    assert limiter.hand_on() == "work"
    limiter.release()
    await claiming
    limiter.release()
    assert limiter.in_use == 0


async def test_waiters_of_one_priority_take_turns_at_the_work_handed_on() -> None:
    """A waiter whose work was taken goes behind the others of its priority, as one that got
    the slot and came back would: a queue's partitions share the slots freed at full load;
    a waiter of a higher priority still comes first every time."""
    limiter: Limiter[str] = Limiter(1)
    await limiter.acquire()
    waiting = [
        asyncio.ensure_future(limiter.acquire(0, functools.partial(lambda name: name, name)))
        for name in ("p0", "p1", "p2")
    ]
    await wait_until_async(lambda: len(limiter._waiters) == 3, timeout=2, message="three in line")
    assert [limiter.hand_on() for _ in range(6)] == ["p0", "p1", "p2", "p0", "p1", "p2"]
    urgent = asyncio.ensure_future(limiter.acquire(5, lambda: "urgent"))
    await wait_until_async(lambda: len(limiter._waiters) == 4, timeout=2, message="four in line")
    assert [limiter.hand_on() for _ in range(2)] == ["urgent", "urgent"]
    # A cancelled waiter leaves no entry behind, renewed or not: try_acquire is not blocked.
    for future in (urgent, *waiting):
        future.cancel()
    await asyncio.gather(urgent, *waiting, return_exceptions=True)
    assert limiter._waiters == []
    limiter.release()
    assert limiter.try_acquire()


async def test_pass_on_keeps_the_slot_for_a_waiter_s_work_and_else_releases_it() -> None:
    """pass_on, for a holder with more work of its own: with nobody waiting the slot is free
    again; with a waiter whose claim finds work, the holder keeps the slot for that work; with
    a waiter whose claim finds none, the slot goes to that waiter."""
    limiter: Limiter[str] = Limiter(1)
    await limiter.acquire()
    assert limiter.pass_on() is None and limiter.in_use == 0

    await limiter.acquire()
    work = ["w1"]
    waiting = asyncio.ensure_future(limiter.acquire(0, lambda: work.pop() if work else None))
    await wait_until_async(lambda: len(limiter._waiters) == 1, timeout=2, message="in line")
    assert limiter.pass_on() == "w1"
    assert limiter.in_use == 1 and not waiting.done()
    assert limiter.pass_on() is None  # its claim found nothing: the slot is the waiter's
    with anyio.fail_after(2):
        await waiting
    assert limiter.in_use == 1
    limiter.release()
    assert limiter.in_use == 0
