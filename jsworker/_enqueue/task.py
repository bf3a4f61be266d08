"""Tasks: functions registered with an app, and the ways to enqueue them."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

from .._config import check_ahead, check_seconds
from .._core.hooks import State
from .._core.middleware import MiddlewareChain
from .._core.task_options import TaskArguments as TaskArguments
from .._core.task_options import TaskOptions
from .._core.view import AppView
from .._errors import ConfigurationError, EnqueueError
from .._limits.spec import Rate
from .._wire.headers import check_headers
from .._wire.names import validate_name
from ..jetstream.message import OutMessage
from .arguments import TypedArguments, positional_names
from .async_result import AsyncResult
from .bound import Given, given_first
from .calls import Call, CallArgs, due_time, new_job_id
from .calls import check_job_id as check_job_id
from .ported import SignatureSpelling, refuse, seconds_until, takes_celery_failure
from .receipt import Job
from .results import TypedResult

P = ParamSpec("P")
R = TypeVar("R")


class Sender(Protocol):
    """What stores a task's calls as jobs (:class:`jsworker._enqueue.producer.Producer`)."""

    async def send(self, task: Task[Any, Any], call: Call, settling: float = 0.0) -> Job:
        """Store one job; its receipt."""
        ...

    async def send_many(self, task: Task[Any, Any], calls: list[Call]) -> list[Job]:
        """Store many jobs; their receipts, in order."""
        ...

    def message(self, task: Task[Any, Any], call: Call, *, spread: bool = True) -> OutMessage:
        """The message that carries ``call`` of ``task``, not sent (in partition 0 without
        ``spread``)."""
        ...


class TaskOwner(AppView, Protocol):
    """An app as its tasks see it: an :class:`~jsworker._core.view.AppView` with the producer
    that stores their jobs, the middleware that stamps them and the state its start hooks keep."""

    @property
    def tasks(self) -> Mapping[str, Task[Any, Any]]: ...

    @property
    def producer(self) -> Sender: ...

    @property
    def middleware(self) -> MiddlewareChain: ...

    @property
    def state(self) -> State: ...

    async def send_linked(
        self, task: Task[Any, Any], call: Call, link: Signature | None, link_error: Signature | None
    ) -> Job:
        """Store ``call`` as the first step of a workflow that runs ``link`` after it (or
        ``link_error`` when it fails); its receipt."""
        ...


def unique_key(task: Task[Any, Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """The job id of a unique task's call: ``<task>-u<hash>``, the hash (sha256, 32 hex digits)
    of the key: the task's key function's answer, or the arguments as canonical JSON."""
    if callable(task.unique):
        key = task.unique(*args, **kwargs)
        if not isinstance(key, str):
            raise TypeError(f"task {task.name}: unique_key must return a str, not {type(key).__name__}")
    else:
        try:
            key = json.dumps([list(args), kwargs], sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"task {task.name}: arguments cannot make a unique key ({exc}); give unique=<a function "
                "of the arguments returning a str>"
            ) from exc
    return f"{task.name}-u{hashlib.sha256(key.encode()).hexdigest()[:32]}"


def _simple_arity(signature: inspect.Signature) -> tuple[int, int] | None:
    """(required, total) positional parameters when every parameter is positional-or-keyword
    (or positional-only); None for signatures with ``*args``, ``**kwargs`` or keyword-only ones."""
    if positional_names(signature) is None:
        return None
    params = signature.parameters.values()
    required = sum(p.default is inspect.Parameter.empty for p in params)
    return required, len(params)


def _check_process_function(name: str, fn: Callable[..., Any], is_async: bool) -> None:
    """ConfigurationError unless a process started afresh can import ``fn``'s module and find
    the task there by the function's qualified name (what a task process does)."""
    where = f"task {name}: executor='process'"
    if is_async:
        raise ConfigurationError(f"{where} is for sync (def) functions; an async one runs on the event loop")
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if not inspect.isfunction(fn) or "<" in qualname:
        # <locals>, <lambda>: nothing a fresh process could look up by name.
        raise ConfigurationError(
            f"{where} needs a function defined at the top level of a module (or a class there), "
            f"found by its name in a fresh process; {qualname or fn!r} is not"
        )
    if module in (None, "__main__", "__mp_main__") or module not in sys.modules:
        raise ConfigurationError(
            f"{where} needs a function of an importable module, not of {module!r} (a script run "
            "directly): a fresh process imports the task's module; move the task into one"
        )


class Task(Generic[P, R]):
    """A function registered with an :class:`~jsworker.App`.

    Calling the task runs the function inline (given its first argument for ``bind=True`` or
    ``ctx=True``, see :mod:`.bound`). ``delay``/``adelay`` enqueue a job with the function's
    own parameter types and return a :class:`~jsworker.Job` receipt.
    """

    def __init__(
        self,
        app: TaskOwner,
        fn: Callable[P, R],
        name: str,
        options: TaskOptions,
        unique: bool | Callable[..., str] = False,
        given: Given | None = None,
    ) -> None:
        self.app = app
        #: True (key: the arguments) or a function of the arguments giving the key: while a
        #: job of this task with that key is scheduled, queued or running, no second is made.
        self.unique = unique
        #: Starts of its jobs allowed across every worker (``@app.task(rate_limit="10/s")``).
        self.rate_limit: Rate | None = None
        #: What a job counts against for the per-partition limits (a function of its
        #: arguments), and those limits (see :mod:`jsworker._limits.partitions`).
        self.partition_key: Callable[..., Any] | None = None
        self.max_running_per_partition: int | None = None
        self.rate_limit_per_partition: Rate | None = None
        self.fn = fn
        self.name = name
        self.options = options
        self.is_async = inspect.iscoroutinefunction(fn)
        #: True for a sync task whose jobs run in the worker's process pool.
        self.in_process = options.executor == "process"
        if self.in_process:
            _check_process_function(name, fn, self.is_async)
        self.signature = inspect.signature(fn)
        #: What a worker calls with a job's arguments: the function, or (``given``: ``bind``,
        #: ``ctx``) the function given its first argument, whose parameters then follow it.
        self.run: Callable[P, R] = fn
        if given is not None:
            self.signature, self.run = given_first(name, fn, given, app)
        #: An errback Celery-style, given ``(request, exc, traceback)`` for a failure's details.
        self.celery_errback = takes_celery_failure(self.signature)
        self._arity = _simple_arity(self.signature)
        #: The annotated parameters checked at enqueue and converted at run (None: none, or
        #: the app turned it off with ``validate_arguments=False``).
        self.typed = TypedArguments.of(name, fn, self.signature) if app.options.validate_arguments else None
        #: How a kept return value is encoded and given back (None: kept as returned).
        self.typed_result = TypedResult.of(fn) if app.options.validate_arguments else None
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    @property
    def queue(self) -> str:
        """The queue this task's jobs go to."""
        return self.options.queue

    def given_back(self, value: Any) -> Any:
        """A kept return value as this task's return annotation says: a ``Decimal``, a
        dataclass... (as kept when the annotation says nothing to convert). ``TypeError``
        when it does not fit, as a result kept before the annotation changed."""
        return value if self.typed_result is None else self.typed_result.decode(value)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.run(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.queue} app={self.app.name}>"

    def check_arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Raise ``TypeError`` if the arguments do not fit the function's signature: their
        number and names (their types are :attr:`typed`'s business). Every keyword the
        function does not take is named, not only the first missing parameter."""
        if not kwargs and self._arity is not None and self._arity[0] <= len(args) <= self._arity[1]:
            return  # plain positional call of a plain signature: nothing bind() could reject
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            unexpected = self._unexpected_keywords(kwargs)
            extra = (
                f" (unexpected: {', '.join(unexpected)})"
                if unexpected and "unexpected" not in str(exc)
                else ""
            )
            raise TypeError(f"task {self.name}: {exc}{extra}") from None

    def _unexpected_keywords(self, kwargs: Mapping[str, Any]) -> list[str]:
        params = self.signature.parameters.values()
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return []
        named = {p.name for p in params if p.kind is not inspect.Parameter.POSITIONAL_ONLY}
        return [repr(k) for k in kwargs if k not in named]

    def make_call(
        self,
        args: Sequence[Any],
        kwargs: Mapping[str, Any] | None,
        job_id: str | None,
        due: datetime | None = None,
        expires: float | None = None,
        queue: str | None = None,
        headers: Mapping[str, str] | None = None,
        schedule: str | None = None,
    ) -> Call:
        """The checked :class:`Call` of these arguments (types encoded when the task has
        annotations); ``TypeError`` when they do not fit the function. ``expires`` (seconds
        from now) overrides the task's; ``queue`` routes this one job to another queue;
        ``headers`` are the caller's own (:func:`~jsworker._wire.headers.check_headers`), then what the
        app's middleware adds (``schedule``: the periodic schedule being declared)."""
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise TypeError(f"task {self.name}: args must be a sequence (a tuple or list), not {args!r:.100}")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise TypeError(f"task {self.name}: kwargs must be a mapping (a dict), not {kwargs!r:.100}")
        kw = dict(kwargs or {})
        self.check_arguments(args, kw)
        # A key function sees the arguments as the caller gave them, the default key the
        # encoded ones (which are what is sent, so equal calls give equal keys).
        key = unique_key(self, args, kw) if callable(self.unique) else None
        if self.typed is not None:
            args, kw = self.typed.encode(args, kw)
        if self.unique is True:
            key = unique_key(self, args, kw)
        if job_id is not None:
            check_job_id(job_id)
            if key is not None:
                raise ConfigurationError(
                    f"task {self.name} is unique: its job id comes from its key, not job_id="
                )
        expires = self.options.expires if expires is None else check_ahead("expires", expires)
        expires_at = None if expires is None else int((time.time() + expires) * 1000)
        if queue is not None and validate_name("queue", queue) == self.queue:
            queue = None
        if headers is not None:
            try:
                headers = check_headers(headers)
            except ValueError as exc:
                raise ConfigurationError(f"task {self.name}: {exc}") from None
        explicit = job_id is not None
        job_id = key or job_id or new_job_id()
        middleware = self.app.middleware
        if middleware.stamps:
            headers = middleware.stamp(
                self.name, queue or self.queue, job_id, tuple(args), kw, headers, due, schedule
            )
        return Call(
            tuple(args), kw, job_id, due, expires_at, key is not None, queue, headers or None, explicit
        )

    def _calls(self, items: Iterable[CallArgs]) -> list[Call]:
        calls = []
        for item in items:
            if isinstance(item, Mapping):
                calls.append(self.make_call((), item, None))
            elif isinstance(item, tuple):
                calls.append(self.make_call(item, None, None))
            else:
                raise TypeError(
                    f"task {self.name}: bulk items must be a tuple of positional arguments or a dict "
                    f"of keyword arguments, not {type(item).__name__}"
                )
        return calls

    # -- async producers ------------------------------------------------------------------

    async def adelay(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Enqueue a job from async code, on the app's connection for this event loop."""
        return await self.app.producer.send(self, self.make_call(args, kwargs, None))

    async def aapply(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        job_id: str | None = None,
        countdown: float | None = None,
        eta: datetime | None = None,
        expires: float | None = None,
        queue: str | None = None,
        headers: Mapping[str, str] | None = None,
        link: Links = None,
        link_error: Links = None,
        timeout: float | None = None,
    ) -> Job:
        """Enqueue with explicit arguments and, optionally, your own job id (dedup key).

        ``countdown`` (seconds) or ``eta`` (a timezone-aware datetime) delays the job: the
        server keeps it and puts it in the queue at that time (never earlier), so it waits
        through worker and server restarts; an ``eta`` in the past runs at once.
        :meth:`App.cancel <jsworker.App.cancel>` removes it until then. ``expires`` (seconds
        from now; the task's by default) drops the job unrun if no worker starts it in time.
        ``queue`` sends this one job to another queue (whose workers must know the task);
        ``headers`` are your own, read in the task as ``current_job().headers`` and kept in
        its dead letter (names starting ``Nats-`` or ``Jsw-`` are refused).

        ``link`` runs once after the job succeeded, with its result first in its arguments;
        ``link_error`` once after it failed for good, with the failure's details (a dict, see
        :func:`~jsworker.workflows._errbacks.failure_details`; an errback of ``request, exc,
        traceback`` gets them as Celery gives them). Either makes the job a two-step workflow
        (``App(workflows=True)``, see :mod:`jsworker.workflows`) whose id is the job's. Each
        takes one signature, or a list of one as Celery spells it.

        ``timeout`` (seconds) bounds this call, the app's ``publish_timeout`` by default: a web
        request need not wait out a server's outage. Past it, :class:`~jsworker.EnqueueError`
        with the job's id: the job may be stored all the same, and enqueueing it again under
        that id cannot make a second one.
        """
        linked, errback = _one_link(self, "link", link), _one_link(self, "link_error", link_error)
        call = self.make_call(args, kwargs, job_id, due_time(countdown, eta), expires, queue, headers)
        return await self._send(call, linked, errback, timeout)

    async def _send(
        self, call: Call, link: Signature | None, link_error: Signature | None, timeout: float | None = None
    ) -> Job:
        if timeout is None:
            return await self._sent(call, link, link_error)
        try:
            async with asyncio.timeout(check_seconds("timeout", timeout)):
                return await self._sent(call, link, link_error)
        except TimeoutError:
            raise EnqueueError(
                f"task {self.name}: job {call.job_id} not acknowledged within {timeout:g}s (timeout=): "
                "it may be stored all the same; enqueue it again with job_id= to be sure",
                job_id=call.job_id,
            ) from None

    async def _sent(self, call: Call, link: Signature | None, link_error: Signature | None) -> Job:
        if link is None and link_error is None:
            return await self.app.producer.send(self, call)
        return await self.app.send_linked(self, call, link, link_error)

    async def adelay_many(self, items: Iterable[CallArgs]) -> list[Job]:
        """Enqueue many jobs with many publishes in flight; one receipt per item, in order."""
        return await self.app.producer.send_many(self, self._calls(items))

    # -- sync producers -------------------------------------------------------------------

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Enqueue a job from sync code (a long-lived connection on a background thread)."""
        call = self.make_call(args, kwargs, None)
        return self.app.bridge.run_sync(self.app.producer.send, self, call)

    def apply(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        job_id: str | None = None,
        countdown: float | None = None,
        eta: datetime | None = None,
        expires: float | None = None,
        queue: str | None = None,
        headers: Mapping[str, str] | None = None,
        link: Links = None,
        link_error: Links = None,
        timeout: float | None = None,
    ) -> Job:
        """Sync form of :meth:`aapply`."""
        linked, errback = _one_link(self, "link", link), _one_link(self, "link_error", link_error)
        call = self.make_call(args, kwargs, job_id, due_time(countdown, eta), expires, queue, headers)
        return self.app.bridge.run_sync(self._send, call, linked, errback, timeout)

    def apply_async(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        countdown: float | None = None,
        eta: datetime | None = None,
        expires: float | timedelta | datetime | None = None,
        task_id: str | None = None,
        queue: str | None = None,
        headers: Mapping[str, str] | None = None,
        link: Links = None,
        link_error: Links = None,
        **unsupported: Any,
    ) -> Job:
        """Celery's ``apply_async``: :meth:`apply` with ``task_id`` as the job id and ``expires``
        in seconds, a timedelta or a datetime. Sync, as Celery's is (``aapply`` from async
        code). Options Celery has and jsworker does not are refused by name."""
        refuse(self.name, "apply_async", unsupported)
        return self.apply(
            args, kwargs, job_id=task_id, countdown=countdown, eta=eta, expires=seconds_until(expires),
            queue=queue, headers=headers, link=link, link_error=link_error,
        )  # fmt: skip

    def delay_many(self, items: Iterable[CallArgs]) -> list[Job]:
        """Sync form of :meth:`adelay_many`."""
        calls = self._calls(items)
        return self.app.bridge.run_sync(self.app.producer.send_many, self, calls)

    def AsyncResult(self, job_id: str) -> AsyncResult:
        """Celery's ``task.AsyncResult(id)``: job ``job_id``'s state, result and revoke."""
        return AsyncResult.of(self.app, job_id)

    # -- workflow steps -------------------------------------------------------------------

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """This task with these arguments bound, for a workflow step: the previous step's
        result comes before them (see :mod:`jsworker.workflows`)."""
        return Signature(self, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """As :meth:`s`, for a step that takes no previous result."""
        return Signature(self, args, kwargs, immutable=True)


@dataclass(frozen=True)
class Signature(SignatureSpelling):
    """``task`` called with ``args`` and ``kwargs``, not enqueued yet: made with
    ``task.s(...)`` (the previous step's result comes first in its arguments) or
    ``task.si(...)`` (``immutable``: it takes no result). ``queue``, ``headers``,
    ``countdown`` (seconds after its step is enqueued) and ``job_id`` apply to its job as
    ``apply``'s do."""

    task: Task[Any, Any]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    immutable: bool = False
    queue: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    countdown: float | None = None
    job_id: str | None = None

    def set(
        self,
        *,
        queue: str | None = None,
        headers: Mapping[str, str] | None = None,
        countdown: float | None = None,
        job_id: str | None = None,
    ) -> Signature:
        """This signature with its job sent to ``queue``, carrying ``headers``, delayed by
        ``countdown`` seconds once its step comes, and/or under ``job_id`` (by default a
        workflow's step has an id derived from the workflow's)."""
        if queue is not None:
            validate_name("queue", queue)
        if headers is not None:
            try:
                headers = check_headers(headers)
            except ValueError as exc:
                raise ConfigurationError(f"task {self.task.name}: {exc}") from None
        if countdown is not None:
            countdown = check_ahead("countdown", countdown)
        return replace(
            self,
            queue=queue if queue is not None else self.queue,
            headers={**self.headers, **(headers or {})},
            countdown=countdown if countdown is not None else self.countdown,
            job_id=check_job_id(job_id) if job_id is not None else self.job_id,
        )

    def describe(self, after_result: bool, errback: bool = False) -> dict[str, Any]:
        """What a workflow's definition keeps of this signature, for a step that is given a
        previous result (or a failure's details) first when it runs (``after_result``: a
        chain's later steps and every callback) or is not (a group's members, a chain's first
        step). An ``errback`` Celery-style is given ``(request, exc, traceback)`` instead of
        the details. Its arguments are encoded through the task's annotations as a call's are,
        ``TypeError`` naming the parameter whose value does not fit."""
        args, kwargs = self.args, dict(self.kwargs)
        typed = self.task.typed
        if typed is not None:
            given = int(after_result and not self.immutable)
            if given and errback and self.task.celery_errback:
                given = 3
            # Only arguments that fit the function are encoded by position: the result to come
            # is counted in.
            self.task.check_arguments((*(None,) * given, *args), kwargs)
            args, kwargs = typed.encode_after(given, args, kwargs)
        return {
            "task": self.task.name,
            "queue": self.queue or self.task.queue,
            "args": list(args),
            "kwargs": kwargs,
            "immutable": self.immutable,
            "headers": dict(self.headers),
            "countdown": self.countdown,
            "job_id": self.job_id,
        }


#: What ``link`` and ``link_error`` take: a signature, or (as Celery spells it) a list of one.
Links = Signature | Sequence[Signature] | None


def _one_link(task: Task[Any, Any], name: str, given: Links) -> Signature | None:
    """``given`` as one signature; ConfigurationError for anything else (a job runs one link:
    several things after it are a chord's or a chain's to run)."""
    if given is None or isinstance(given, Signature):
        return given
    found = list(given) if isinstance(given, Sequence) and not isinstance(given, str | bytes) else None
    if found is not None and len(found) == 1 and isinstance(found[0], Signature):
        return found[0]
    if found is not None and len(found) > 1:
        raise ConfigurationError(
            f"task {task.name}: {name} takes one signature, not {len(found)}: to run several after "
            "the job, make them a chord's members or a chain's steps"
        )
    raise ConfigurationError(f"task {task.name}: {name} takes a signature (task.s(...)), not {given!r:.100}")
