"""Tasks' rate limits in the worker: a job starts with one of its task's starts in hand, and
waits for one in its slot or is given back (see :mod:`..limited`). A queue's rate limit is
the pull loop's, before a job takes a slot (see ``Worker._start_jobs``)."""

from __future__ import annotations

from collections.abc import Awaitable

from ..._limits.rates import RateLimiter
from ..execution import JobRun
from ..limited import HELD_BACK, Holding, gated, keep, rate_give_back
from ..outcomes import Outcome
from ..pipeline import Interceptor


class TaskRateLimits(Interceptor):
    """The starts of tasks with a rate limit, counted on the server."""

    name = "task-rate-limits"

    def __init__(self, holding: Holding, limits: dict[str, RateLimiter]) -> None:
        self._holding = holding
        self._limits = limits

    def admit(self, job: JobRun) -> Awaitable[Outcome | None] | None:
        """A start in hand lets the job go at once; else it asks the server for one, and
        waits for it in its slot or is given back."""
        limiter = self._limits.get(job.task_name) if job.task is not None else None
        if limiter is None or limiter.in_hand():
            return None
        reason = f"{HELD_BACK}the rate limit of task {job.task_name}"
        return gated(self._turn(job, limiter, reason), reason)

    async def _turn(self, job: JobRun, limiter: RateLimiter, reason: str) -> None:
        if await limiter.take():
            return
        await self._holding.wait_or_give_back(
            job, limiter.scope, reason, keep(limiter.rate), limiter.acquire, rate_give_back(job, limiter)
        )
