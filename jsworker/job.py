"""What callers get back from an enqueue, and what a running task can learn about its job."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime

from .errors import JsworkerError


@dataclass(frozen=True, slots=True)
class Job:
    """Receipt for an enqueued job.

    ``duplicate`` is True when the server already held a job with this id inside its dedup
    window: nothing new was stored and ``seq`` is the original job's stream sequence.
    ``scheduled_for`` is when a delayed job becomes runnable (UTC), None for a job that can
    run now; ``seq`` is then the sequence of its schedule, not of the job it fires.
    """

    id: str
    task: str
    queue: str
    seq: int
    duplicate: bool = False
    scheduled_for: datetime | None = None


@dataclass(frozen=True, slots=True)
class JobContext:
    """The job a task is running for, as returned by :func:`current_job`.

    ``attempt`` starts at 1 and counts deliveries by the server, so a job whose worker crashed
    comes back with a higher attempt too. Use ``id`` to make side effects idempotent: it is the
    same on every attempt. ``enqueued_at`` is when the producer enqueued the job (unix
    seconds, the producer's clock; the same on every attempt), None when the message does not
    say (a hand-made one). ``headers`` are the message's headers as delivered.
    ``scheduled_for`` is when a delayed job was due or a periodic schedule ticked (UTC), None
    for a job enqueued to run at once.
    """

    id: str
    task: str
    queue: str
    attempt: int
    max_retries: int
    enqueued_at: float | None
    headers: Mapping[str, str] = field(default_factory=dict)
    scheduled_for: datetime | None = None

    @property
    def is_last_attempt(self) -> bool:
        """True when a failure now would dead-letter the job instead of retrying it."""
        return self.attempt > self.max_retries


# Holds how to build the running job's JobContext rather than the context itself: most jobs
# never ask for it, and building one per job is a measurable part of a short job's cost.
running_job: ContextVar[Callable[[], JobContext] | None] = ContextVar("jsworker_current_job", default=None)
"""Set by the worker around each job run: what :func:`current_job` and the log processor read."""


def current_job() -> JobContext:
    """Return the job the calling task is running for.

    Works in async tasks and in sync tasks (their thread gets the job's context). Raises
    :class:`JsworkerError` when called outside a task run by a worker.
    """
    source = running_job.get()
    if source is None:
        raise JsworkerError("current_job() called outside a job run by a jsworker worker")
    return source()
