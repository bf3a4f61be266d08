"""The concurrency limiter: how many jobs a worker runs at once."""

from __future__ import annotations

import asyncio
import heapq
import itertools


class Limiter:
    """Counting slots for running jobs, handed to the waiter with the highest priority, and
    among equals to the one that came first (queue priorities: a worker serving several
    queues gives each freed slot to the most important queue that has a job waiting).

    The worker takes a slot *before* it takes a message out of the pull loop's buffer, so
    messages pulled but not finished never exceed the slots plus the pull loops' buffers.
    :meth:`try_acquire` lets a message that arrives while a slot is free start at once, from
    the code that received it, without waking the pull loop; it never overtakes a waiter.

    Hand-written because it is taken and given back once per job: ``anyio.CapacityLimiter``
    and ``anyio.Semaphore`` yield to the event loop even when a slot is free, and cost many
    times as much (bench/README.md, "Hot-path choices").
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("concurrency must be >= 1")
        self.limit = limit
        self._in_use = 0
        # (-priority, arrival, future): a heap, so the first is the next to be served.
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
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

    async def acquire(self, priority: int = 0) -> None:
        """Wait for a free slot and take it; waiters with a higher ``priority`` go first."""
        if self.try_acquire():
            return
        waiter = asyncio.get_running_loop().create_future()
        entry = (-priority, next(self._arrivals), waiter)
        heapq.heappush(self._waiters, entry)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.cancelled():
                if entry in self._waiters:
                    self._waiters.remove(entry)
                    heapq.heapify(self._waiters)
            else:  # the slot was handed over just before the cancellation: pass it on
                self.release()
            raise

    def release(self) -> None:
        """Give a slot back: to the first waiter if there is one, else to the pool."""
        while self._waiters:
            waiter = heapq.heappop(self._waiters)[2]
            if not waiter.done():
                waiter.set_result(None)  # the slot changes hands; in_use stays the same
                return
        self._in_use -= 1
