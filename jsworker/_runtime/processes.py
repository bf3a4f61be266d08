"""Sync tasks declared with ``executor="process"``: run in a pool of processes of the worker's.

The processes are fresh interpreters, never forks (the worker has threads and an event loop),
each started on first need, up to ``processes`` of them, and kept for the next call; a worker
without such a task starts none. A process ends when the pool is closed, and within a second
of the worker's end however that comes (``kill -9`` included).

Only names, bytes and plain values cross to a process: the task's module and qualified name,
the job's body as the app's serializer encoded it, and the job's identity for
``current_job()``. The process imports the module and finds the task there, so the function,
its options and the app's serializer are those the module declares; it decodes the body,
calls the function, and sends back the return value encoded by that serializer, or what the
function raised, classified there against the task's ``retry_on``/``dont_retry_on``. Values
of the task's own never go through pickle.

Unlike a thread, a process can be stopped: a call past the task's timeout, or whose job is
cancelled (``app.cancel``, or a shutdown past its grace), has its process killed, and a new
one is started on next need. The timeout counts from when the process starts the call: the
wait for a free process, and a new process's start-up, are not part of it.

This module is what crosses and what runs in a task process; :mod:`.process_pool` is the
worker's side, the pool of processes.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import signal
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

from .._core.serializers import Serializer, decode_call
from .._enqueue.receipt import JobContext, running_job
from .._enqueue.task import Task
from .._errors import ConfigurationError, Reject, Retry, Snooze
from .._errors import ProcessExited as ProcessExited
from .._observability.logging import get_logger
from ..workflows._definition import FLOW_STEP
from ..workflows._errbacks import celery_failure

log = get_logger("jsworker.worker")

# What a process sends when it has found the task and starts the call: the timeout runs from here.
STARTED = "started"

# A task process's program: a fresh interpreter that imports only jsworker (not the worker's
# __main__, as multiprocessing's spawn would: a script that runs a worker would run one
# again), with the worker's sys.path, which is the first thing sent. Ctrl-C in a terminal
# signals the whole process group: what happens to a running job is for the worker to decide
# (its grace period), so the process ignores it from its first statement.
BOOTSTRAP = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "from multiprocessing.connection import Connection; "
    "requests = Connection(int(sys.argv[1]), writable=False); sys.path[:] = requests.recv(); "
    "from jsworker._runtime.processes import serve; "
    "serve(requests, Connection(int(sys.argv[2]), readable=False))"
)
# How often a task process checks that its worker is still there.
_WATCH_PARENT_EVERY = 1.0


class ProcessCall(NamedTuple):
    """One job as it crosses to a task process: names, bytes and plain values only."""

    module: str
    qualname: str
    task: str
    content_type: str
    body: bytes
    keep_result: bool
    job: dict[str, Any]  # JobContext's fields but is_cancelled


class Returned(NamedTuple):
    """The call returned: its value encoded by the app's serializer (None for None, or when
    the task keeps no result)."""

    value: bytes | None


class Raised(NamedTuple):
    """The call raised (``kind`` ``"error"``, ``"retry"``, ``"snooze"`` or ``"reject"``), or its return value
    could not be encoded (``"result"``): the exception's class, message and traceback as text."""

    kind: str
    module: str
    qualname: str
    message: str
    traceback: str
    retryable: bool = False
    delay: float | None = None


class TaskProcessError(Exception):
    """What a task raised in its process, as the worker sees it.

    Each is an instance of a subclass named like the original exception (same module and
    qualified name, so dead letters and results name it as a thread run would), whose message
    is the original's and whose ``__cause__`` holds the traceback from the process.
    ``retryable`` was decided in the process, against the real exception.
    """

    def __init__(self, message: str, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class ResultError(TaskProcessError):
    """A process task's return value that could not reach the worker through the app's
    serializer; ``reason`` says so as the worker's own check of a result would."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message, retryable=False)
        self.reason = reason


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a task process, as text."""

    def __str__(self) -> str:
        return f'\n"""\n{self.args[0]}"""'


def process_call(task: Task[Any, Any], job: JobContext, body: bytes, content_type: str) -> ProcessCall:
    """What a task process needs to run ``task`` for the job ``job`` whose body is ``body``."""
    # The worker's callbacks stay in the worker: a task process cannot call them back.
    local = ("is_cancelled", "on_progress")
    facts = {f.name: getattr(job, f.name) for f in dataclasses.fields(JobContext) if f.name not in local}
    facts["headers"] = dict(job.headers)
    fn = task.fn
    return ProcessCall(
        fn.__module__, fn.__qualname__, task.name, content_type, body, task.options.store_result, facts
    )


def find(module: str, qualname: str) -> object:
    """The object ``qualname`` names in ``module`` (imported if it is not yet), as pickle would
    find a function by reference."""
    found: object = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def check_findable(task: Task[Any, Any]) -> None:
    """ConfigurationError unless a task process will find ``task`` where its function's name
    says: the decorator's result bound to that name, not the bare function or a wrapper."""
    fn = task.fn
    where = f"{fn.__module__}.{fn.__qualname__}"
    try:
        found = find(fn.__module__, fn.__qualname__)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"task {task.name}: executor='process' cannot find {where}: {exc}") from exc
    if found is not task:
        raise ConfigurationError(
            f"task {task.name}: executor='process' finds the task in a fresh process by its "
            f"function's name, but {where} is {type(found).__name__} {found!r:.80}, not the task; "
            "put @app.task(...) on the function itself so that its name holds the task"
        )


# -- in the task process ------------------------------------------------------------------


def serve(requests: Connection, replies: Connection) -> None:
    """A task process's life: run the calls the worker sends until it closes the pipe, or
    until the worker is gone (killed with -9, say), even in the middle of a call."""
    threading.Thread(target=_watch_parent, args=(os.getppid(),), name="jsworker-parent", daemon=True).start()
    while True:
        try:
            call = requests.recv()
            replies.send(_run(call, replies))
        except (EOFError, OSError):
            return  # the worker closed its end, or is gone


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(_WATCH_PARENT_EVERY)
    # The worker is gone: end at once, whatever the main thread is in the middle of.
    os.kill(os.getpid(), signal.SIGKILL)


def _run(call: ProcessCall, replies: Connection) -> Returned | Raised:
    try:
        task = find(call.module, call.qualname)
        if not isinstance(task, Task) or task.name != call.task:
            raise ConfigurationError(f"{call.module}.{call.qualname} is not task {call.task} here")
        serializer = task.app.serializer
        if serializer.content_type != call.content_type:
            raise ConfigurationError(
                f"task {call.task}: the worker's serializer is {call.content_type}, "
                f"this process's {serializer.content_type}"
            )
    except Exception as exc:
        return _raised("error", exc)
    replies.send(STARTED)
    context = JobContext(**call.job)
    token = running_job.set(lambda: context)
    try:
        args, kwargs = decode_call(serializer, call.body)
        if task.celery_errback and context.headers.get(FLOW_STEP) == "err":
            args = celery_failure(args)
        if task.typed is not None:
            typed_args, kwargs = task.typed.decode(args, kwargs)
            args = list(typed_args)
        value = task.run(*args, **kwargs)
    except Retry as exc:
        return _raised("retry", exc, message=exc.reason, delay=exc.delay)
    except Snooze as exc:
        return _raised("snooze", exc, message=exc.reason, delay=exc.delay)
    except Reject as exc:
        return _raised("reject", exc, message=exc.reason)
    except BaseException as exc:  # sys.exit() in a task fails its job, as in a thread
        return _raised("error", exc, retryable=task.options.is_retryable(exc))
    finally:
        running_job.reset(token)
    if value is None or not call.keep_result:
        return Returned(None)
    try:
        typed = task.typed_result
        return Returned(serializer.dumps(value if typed is None else typed.encode(value)))
    except Exception as exc:  # an encoder may raise anything on a foreign object
        return _raised("result", exc)


def _raised(
    kind: str,
    exc: BaseException,
    *,
    retryable: bool = False,
    message: str | None = None,
    delay: float | None = None,
) -> Raised:
    cls, text = type(exc), "".join(traceback.format_exception(exc))
    said = str(exc) if message is None else message
    return Raised(kind, cls.__module__, cls.__qualname__, said, text, retryable, delay)


# -- in the worker ------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _named(base: type[BaseException], module: str, qualname: str) -> type[BaseException]:
    """A subclass of ``base`` named ``module.qualname`` (``base`` itself when that is its name),
    made once per name: what records and dead letters print is the class's name."""
    if (base.__module__, base.__qualname__) == (module, qualname):
        return base
    return type(qualname.rpartition(".")[2], (base,), {"__module__": module, "__qualname__": qualname})


def _rebuild(raised: Raised, content_type: str) -> BaseException:
    """The exception the worker raises for ``raised``: the stand-in of what the task raised."""
    name = (raised.module, raised.qualname)
    if raised.kind == "retry":
        return _named(Retry, *name)(raised.delay, raised.message)
    if raised.kind == "snooze":
        return _named(Snooze, *name)(raised.delay or 0.0, raised.message)
    if raised.kind == "reject":
        return _named(Reject, *name)(raised.message)
    if raised.kind == "result":
        reason = f"return value cannot be encoded with {content_type}: {raised.message}"
        return _named(ResultError, *name)(raised.message, reason)
    return _named(TaskProcessError, *name)(raised.message, raised.retryable)


def unpack(answer: Returned | Raised, content_type: str, serializer: Serializer) -> Any:
    """The value a call returned, decoded; or its stand-in exception, raised."""
    if isinstance(answer, Raised):
        raise _rebuild(answer, content_type) from RemoteTraceback(answer.traceback)
    if answer.value is None:
        return None
    try:
        return serializer.loads(answer.value)
    except Exception as exc:  # a decoder may raise anything on bytes it does not expect
        reason = f"return value cannot be decoded with {serializer.content_type}: {exc}"
        raise ResultError(str(exc), reason) from exc
