"""The concurrency limiter: how many jobs a worker runs at once."""

from __future__ import annotations

import asyncio


class Limiter:
    """Counting slots for running jobs.

    The worker takes a slot *before* it takes a message out of the pull loop's buffer, so
    messages pulled but not finished never exceed the slots plus the pull loops' buffers.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("concurrency must be >= 1")
        self.limit = limit
        self._free = asyncio.Semaphore(limit)
        self._in_use = 0

    @property
    def in_use(self) -> int:
        """Slots taken right now."""
        return self._in_use

    async def acquire(self) -> None:
        """Wait for a free slot and take it."""
        await self._free.acquire()
        self._in_use += 1

    def release(self) -> None:
        """Give a slot back."""
        self._in_use -= 1
        self._free.release()
