"""The concurrency limiter: how many jobs a worker runs at once."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

#: What a waiter would do with the slot, done for it by a holder that keeps its slot instead
#: (:meth:`Limiter.hand_on`): the work it takes, or None when it has none. It must not call
#: the limiter.
Claim = Callable[[], T | None]


class Limiter(Generic[T]):
    """Counting slots for running jobs, handed to the waiter with the highest priority, and
    among equals to the one that came first (queue priorities: a worker serving several
    queues gives each freed slot to the most important queue that has a job waiting).

    The worker takes a slot *before* it takes a message out of the pull loop's buffer, so
    messages pulled but not finished never exceed the slots plus the pull loops' buffers.
    :meth:`try_acquire` lets a message that arrives while a slot is free start at once, from
    the code that received it, without waking the pull loop; it never overtakes a waiter.
    :meth:`hand_on` lets a holder done with its work take the first waiter's next piece of
    work (its ``claim``) and keep the slot for it, instead of waking that waiter to do it:
    at full load every job then starts without a wake-up of the pull loop.

    Hand-written because it is taken and given back once per job: ``anyio.CapacityLimiter``
    and ``anyio.Semaphore`` yield to the event loop even when a slot is free, and cost many
    times as much (bench/README.md, "Hot-path choices").
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("concurrency must be >= 1")
        self.limit = limit
        self._in_use = 0
        # (-priority, arrival, future, claim): a heap, so the first is the next to be served.
        self._waiters: list[tuple[int, int, asyncio.Future[None], Claim[T] | None]] = []
        self._arrivals = itertools.count()

    @property
    def in_use(self) -> int:
        """Slots taken right now."""
        return self._in_use

    def try_acquire(self) -> bool:
        """Take a slot if one is free and nobody is waiting for one; True if taken."""
        if self._in_use < self.limit and not self._waiters:
            self._in_use += 1
            return True
        return False

    async def acquire(self, priority: int = 0, claim: Claim[T] | None = None) -> None:
        """Wait for a free slot and take it; waiters with a higher ``priority`` go first.
        While it waits first in line, holders may do its work with their own slots through
        ``claim`` (see :meth:`hand_on`)."""
        if self.try_acquire():
            return
        waiter = asyncio.get_running_loop().create_future()
        entry = (-priority, next(self._arrivals), waiter, claim)
        heapq.heappush(self._waiters, entry)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.cancelled():
                # Its entry, or the one hand_on put in its place.
                self._waiters = [e for e in self._waiters if e[2] is not waiter]
                heapq.heapify(self._waiters)
            else:  # the slot was handed over just before the cancellation: pass it on
                self.release()
            raise

    def hand_on(self) -> T | None:
        """For a holder done with its work: the first waiter's next piece of work, taken by
        its claim, for the holder to do with the slot it keeps; the waiter goes on waiting,
        behind the others of its priority. None when the first waiter has no claim or its
        claim found nothing: :meth:`release` the slot then, to that waiter, as always."""
        waiters = self._waiters
        while waiters:
            first = waiters[0]
            if first[2].done():  # cancelled, and not yet out of the heap
                heapq.heappop(waiters)
                continue
            claim = first[3]
            if claim is None:
                return None
            work = claim()
            if work is not None:
                # Served, as if the slot had come to it and it had come back for the next one:
                # behind the waiters of its priority that were there before, so that equals
                # take turns (a queue's partitions, queues of one priority).
                heapq.heapreplace(waiters, (first[0], next(self._arrivals), first[2], claim))
            return work
        return None

    def pass_on(self) -> T | None:
        """For a holder done with its work that has other work to do: the first waiter's next
        piece of work to take with the slot (see :meth:`hand_on`), or None when the slot was
        released instead."""
        work = self.hand_on()
        if work is None:
            self.release()
        return work

    def release(self) -> None:
        """Give a slot back: to the first waiter if there is one, else to the pool."""
        while self._waiters:
            waiter = heapq.heappop(self._waiters)[2]
            if not waiter.done():
                waiter.set_result(None)  # the slot changes hands; in_use stays the same
                return
        self._in_use -= 1
