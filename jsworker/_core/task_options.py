"""How a task's jobs are queued, retried and timed: :class:`TaskOptions`, and the keyword
arguments of ``app.task(...)`` that set them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from .._config import check_ahead, check_seconds, option
from .._errors import ConfigurationError
from .._wire.names import validate_name

ExceptionTypes = tuple[type[BaseException], ...]

#: Where a sync task's function runs: the worker's threads, or a pool of processes of its own.
ExecutorKind = Literal["thread", "process"]


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """How a task's jobs are queued, retried and timed; resolved against the app's defaults.

    ``ack_wait`` is how long the server waits for a sign of life before handing the job to
    another worker; a queue's consumer uses the largest ``ack_wait`` of its tasks, and workers
    send heartbeats at a third of it. ``timeout`` (seconds, None for none) cancels a job that
    runs too long and counts as a retryable failure. An exception retries when it is one of
    ``retry_on`` and none of ``dont_retry_on``; any other goes straight to the dead letters.
    Values are checked on construction: a bad one raises :class:`ConfigurationError`.
    """

    queue: str = option("default", help="The queue the task's jobs go to.")
    max_retries: int = option(
        3, help="Retries after the task's own failures (raised, timed out) before a job is dead-lettered."
    )
    max_crashes: int = option(
        2,
        help="Runs that may end with no outcome (the worker died, was killed or lost the server) "
        "before the job is dead-lettered as one that kills its workers.",
    )
    timeout: float | None = option(
        None, help="Seconds a run may take before it is cancelled (None: no limit)."
    )
    ack_wait: float = option(30.0, help="Seconds without a sign of life before the server redelivers a job.")
    retry_backoff: float = option(1.0, help="Seconds before the first retry; doubles per retry.")
    retry_backoff_max: float = option(600.0, help="Most seconds any retry waits.")
    retry_on: ExceptionTypes = option((Exception,), help="Exceptions that retry.")
    dont_retry_on: ExceptionTypes = option((), help="Exceptions that never retry, even if in retry_on.")
    store_result: bool = option(
        False, help="Keep each job's return value (or failure) for job.result() and app.status()."
    )
    result_ttl: float = option(86400.0, help="Seconds a job's result and final state are kept.")
    expires: float | None = option(
        None, help="Seconds after enqueue past which a job that has not started is never run (None: never)."
    )
    executor: ExecutorKind = option(
        "thread",
        help="Where a sync task runs: 'thread' (the worker's threads) or 'process' (a process pool).",
    )

    def __post_init__(self) -> None:
        validate_name("queue", self.queue)
        if self.executor not in ("thread", "process"):
            raise ConfigurationError(f"executor must be 'thread' or 'process', not {self.executor!r}")
        for name in ("max_retries", "max_crashes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigurationError(f"{name} must be an int >= 0, not {value!r}")
        if self.timeout is not None:
            check_seconds("timeout", self.timeout)
        check_seconds("ack_wait", self.ack_wait)
        check_seconds("result_ttl", self.result_ttl)
        if self.expires is not None:
            check_ahead("expires", self.expires)
        object.__setattr__(self, "store_result", bool(self.store_result))
        check_seconds("retry_backoff", self.retry_backoff, positive=False)
        check_seconds("retry_backoff_max", self.retry_backoff_max, positive=False)
        for what in ("retry_on", "dont_retry_on"):
            types = getattr(self, what)
            if isinstance(types, type):
                types = (types,)
                object.__setattr__(self, what, types)
            if not all(isinstance(t, type) and issubclass(t, BaseException) for t in types):
                raise ConfigurationError(f"{what} must be exception classes, not {types!r}")

    def is_retryable(self, exc: BaseException) -> bool:
        """Whether a failure with ``exc`` may be retried (attempts permitting)."""
        return isinstance(exc, self.retry_on) and not isinstance(exc, self.dont_retry_on)


class TaskArguments(TypedDict, total=False):
    """The keyword options of ``app.task(...)``: the fields of :class:`TaskOptions`, each None
    for the app's default. A test checks this list against :class:`TaskOptions`."""

    queue: str | None
    max_retries: int | None
    max_crashes: int | None
    timeout: float | None
    ack_wait: float | None
    retry_backoff: float | None
    retry_backoff_max: float | None
    retry_on: ExceptionTypes | None
    dont_retry_on: ExceptionTypes | None
    store_result: bool | None
    result_ttl: float | None
    expires: float | None
    executor: ExecutorKind | None


class TaskDeclaration(TaskArguments, total=False):
    """The keyword arguments of ``app.task(...)`` besides ``bind`` and ``ctx``: the task's
    name, its periodic schedule, uniqueness and limits, then its :class:`TaskArguments`."""

    name: str | None
    cron: str | None
    tz: str | None
    unique: bool
    unique_key: Callable[..., str] | None
    rate_limit: str | None
    partition_key: Callable[..., Any] | None
    max_running_per_partition: int | None
    rate_limit_per_partition: str | None
