"""Jobs a limit holds back: a few wait in their slots, the others go back to the server.

A job of a task with a rate limit, or of a partition with a concurrency or rate limit, may not
be allowed to start when it arrives. Waiting in its worker slot it holds that slot for as long
as the limit keeps it, and a task offered more than its limit then fills every slot of every
worker with jobs that wait while every other queue stops (a 20/s task offered 40/s held all
300 slots of a fleet while 29,789 other jobs waited). So a worker keeps at most :func:`keep`
jobs of one limit waiting in slots, enough for the limit's next windows to find one ready, and
gives every other one back to the server at once: snoozed until about when its turn may come,
a delayed redelivery that spends no attempt (its record counts it among ``snoozes``, as a
task's own ``Snooze``; the outcome says ``held``). The limit stays exact: starts are counted
on the server as before, whichever worker the job comes back to.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .._limits.rates import RateLimiter
from .._limits.spec import Rate
from .execution import JobRun
from .jobbook import JobBook
from .outcomes import Outcome, OutcomeKind

T = TypeVar("T")

#: How the reason of a job held back by a limit begins (waiting in its slot or given back).
HELD_BACK = "held back by "
#: The longest a job a rate limit gave back waits before the server delivers it again
#: (seconds): the rate says how long a backlog takes.
LONGEST_GIVE_BACK = 30.0


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
    tells it queued, with the reason); what it gives. The job's run starts once the wait is
    over: its start time (status, record, duration) is taken again then."""
    book.held_back[job] = reason
    try:
        got = await limit
    finally:
        del book.held_back[job]
    job.started = time.monotonic()
    return got


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


async def gated(turn: Awaitable[Any], reason: str) -> Outcome | None:
    """A limit's verdict once ``turn`` is over: None to start, or the job given back."""
    try:
        await turn
    except _GivenBack as back:
        return Outcome(OutcomeKind.SNOOZED, reason, retry_delay=back.delay, held=True)
    return None


def rate_give_back(job: JobRun, limiter: RateLimiter) -> Callable[[], float]:
    """How long ``job`` waits once given back by ``limiter`` (counted as held meanwhile; one
    that waits in its slot is counted by the limiter): at first about as long as the starts
    a worker keeps in hand take."""

    def delay() -> float:
        limiter.held()
        rate = limiter.rate
        return give_back_delay(job, max(rate.window, keep(rate) * rate.period / rate.count))

    return delay
