"""Celery's and arq's spellings of an enqueue, for code ported from them. Each maps onto
jsworker's own call and nothing more; what differs (default retries, results, how long a job
id stays taken) is in docs/migrating.md."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from .._errors import ConfigurationError

if TYPE_CHECKING:
    from .receipt import Job


class _Ported(Protocol):
    def apply_async(
        self, args: Sequence[Any] = ..., kwargs: Mapping[str, Any] | None = ..., **options: Any
    ) -> Job: ...


class _Signed(Protocol):
    """What a signature is made of, as its spellings read it."""

    @property
    def task(self) -> _Ported: ...
    @property
    def args(self) -> tuple[Any, ...]: ...
    @property
    def kwargs(self) -> Mapping[str, Any]: ...
    @property
    def queue(self) -> str | None: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def countdown(self) -> float | None: ...
    @property
    def job_id(self) -> str | None: ...


class SignatureSpelling:
    """Celery's ``delay`` and ``apply_async`` on a signature: its task's job, now."""

    def delay(self: _Signed, *args: Any, **kwargs: Any) -> Job:
        """Enqueue this signature's task with its arguments, then ``args`` and ``kwargs``."""
        return SignatureSpelling.apply_async(self, args, kwargs)

    def apply_async(
        self: _Signed, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> Job:
        """Enqueue this signature's task with its arguments, then ``args`` and ``kwargs``;
        ``options`` as the task's ``apply_async`` takes them, over the signature's own."""
        own: dict[str, Any] = {"queue": self.queue, "headers": dict(self.headers) or None}
        if self.countdown is not None:
            own["countdown"] = self.countdown
        if self.job_id is not None:
            own["task_id"] = self.job_id
        call_args, call_kwargs = (*self.args, *args), {**self.kwargs, **(kwargs or {})}
        return self.task.apply_async(call_args, call_kwargs, **{**own, **options})


def refuse(task: str, spelling: str, unsupported: Mapping[str, Any]) -> None:
    """ConfigurationError naming the options of ``spelling`` that jsworker has no use for."""
    if unsupported:
        raise ConfigurationError(
            f"task {task}: {spelling} takes no {', '.join(sorted(unsupported))} here (docs/migrating.md)"
        )


# The first parameters of an errback Celery calls with the failed task's request, its
# exception and its traceback.
_CELERY_ERRBACK = ("request", "exc", "traceback")


def takes_celery_failure(signature: inspect.Signature) -> bool:
    """Whether a function of ``signature`` is an errback as Celery calls one: its first three
    parameters named ``request``, ``exc``, ``traceback``, each taken by position."""
    by_position = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    first = list(signature.parameters.values())[:3]
    return tuple(p.name for p in first) == _CELERY_ERRBACK and all(p.kind in by_position for p in first)


def seconds_until(when: float | datetime | timedelta | None) -> float | None:
    """Seconds from now: ``when`` as seconds, a timedelta, or a (timezone-aware) datetime."""
    if when is None or isinstance(when, int | float):
        return when
    if isinstance(when, timedelta):
        return when.total_seconds()
    if when.tzinfo is None:
        raise ConfigurationError("a datetime here must carry its timezone (datetime.now(UTC) ...)")
    return (when - datetime.now(UTC)).total_seconds()


class _SendsTasks(Protocol):
    async def asend_task(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        queue: str | None = None,
        **options: Any,
    ) -> Job: ...


class ArqSpelling:
    """arq's ``enqueue_job`` on an app."""

    async def enqueue_job(
        self: _SendsTasks,
        function: str,
        *args: Any,
        _job_id: str | None = None,
        _queue_name: str | None = None,
        _defer_until: datetime | None = None,
        _defer_by: float | timedelta | None = None,
        _expires: float | timedelta | None = None,
        **kwargs: Any,
    ) -> Job | None:
        """arq's ``enqueue_job``: task ``function`` by its name with ``args`` and ``kwargs``;
        None, as arq answers, when a job with ``_job_id`` is held already (jsworker's own
        calls return that job's receipt, with ``duplicate`` set)."""
        job = await self.asend_task(
            function, args, kwargs, queue=_queue_name, job_id=_job_id, eta=_defer_until,
            countdown=seconds_until(_defer_by), expires=seconds_until(_expires),
        )  # fmt: skip
        return None if job.duplicate else job
