"""What a running task can learn about its job: :class:`JobContext` and :func:`current_job`.

A module of the package's base: it imports no more than the exceptions, so the logs (which
stamp every event with the running job) and every layer above can read the running job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime

from ._errors import JsworkerError

# A progress message is for a glance at a status, not a log: longer ones are cut.
_MAX_PROGRESS_TEXT = 200


@dataclass(frozen=True, slots=True)
class JobContext:
    """The job a task is running for, as returned by :func:`current_job`.

    ``attempt`` starts at 1 and counts deliveries by the server, so a job whose worker crashed
    comes back with a higher attempt too. ``seq`` is the stream sequence of the job's message:
    the same on every attempt, new for each job even where the id comes back (a unique task's
    next job, an explicit id reused later). Make side effects idempotent with
    :attr:`idempotency_key`. ``enqueued_at`` is when the producer enqueued the job (unix
    seconds, the producer's clock; the same on every attempt), None when the message does not
    say (a hand-made one). ``headers`` are the message's headers as delivered.
    ``scheduled_for`` is when a delayed job was due or a periodic schedule ticked (UTC), None
    for a job enqueued to run at once. ``cancelled`` turns True when the job is cancelled while
    it runs: an async task is cancelled for it, a sync one (a thread cannot be interrupted)
    should check it between steps and return.
    """

    id: str
    task: str
    queue: str
    attempt: int
    max_retries: int
    enqueued_at: float | None
    headers: Mapping[str, str] = field(default_factory=dict)
    scheduled_for: datetime | None = None
    seq: int = 0
    is_cancelled: Callable[[], bool] = field(default=lambda: False, repr=False, compare=False)
    #: Where :meth:`set_progress` goes: the worker keeps the latest in memory.
    on_progress: Callable[[float, str | None], None] = field(
        default=lambda fraction, message: None, repr=False, compare=False
    )

    @property
    def idempotency_key(self) -> str:
        """``<id>-<seq>``: the same on every attempt of this job, and different for every other
        job, those that reuse its id included. ``id`` alone comes back for each job of a unique
        task's key."""
        return f"{self.id}-{self.seq}"

    @property
    def cancelled(self) -> bool:
        """True once the job has been cancelled (``app.cancel``) while it runs."""
        return self.is_cancelled()

    def set_progress(self, fraction: float, message: str | None = None) -> None:
        """Say how far the job has come (``fraction`` from 0 to 1, and a short ``message``):
        its status (``progress``, ``progress_message``) shows the latest while it runs. Kept
        in the worker's memory and read only when someone asks: as cheap to call often as
        rarely. ValueError for a fraction outside 0..1."""
        if not isinstance(fraction, int | float) or isinstance(fraction, bool) or not 0 <= fraction <= 1:
            raise ValueError(f"progress is a fraction from 0 to 1, not {fraction!r}")
        if message is not None:
            message = str(message)[:_MAX_PROGRESS_TEXT]
        self.on_progress(float(fraction), message)

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
