"""jsworker: a task queue on NATS JetStream.

Declare work with :meth:`App.task`, enqueue with ``task.delay(...)`` (sync) or
``await task.adelay(...)`` (async), run it with ``jsworker run module``.

Every exception jsworker raises is importable from here (all defined in :mod:`jsworker._errors`,
under :class:`JsworkerError`), as is :func:`live_workers`, the live worker processes of an app
as ``jsworker workers`` shows them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _moved
from ._app import App
from ._core.lazy import lazy_getattr
from ._core.middleware import Middleware, OutgoingJob, Settled
from ._core.serializers import JSONSerializer, Serializer
from ._enqueue.receipt import Job, JobContext, current_job
from ._enqueue.task import Task
from ._errors import (
    ApiError,
    BadRowError,
    ConfigurationError,
    ConnectError,
    ConsumeError,
    DeadLetterNotFound,
    DeadLetterNotReplayable,
    EnqueueError,
    EventsNotFound,
    HistoryError,
    JobCancelled,
    JobExpired,
    JobFailed,
    JobNotFound,
    JobTimeout,
    JsworkerError,
    LimitsStreamError,
    NoStreamError,
    NoWorkerRunning,
    PayloadTooLargeError,
    PermissionDeniedError,
    PortInUseError,
    ProcessExited,
    ProvisioningNeeded,
    RefusedError,
    Reject,
    Retry,
    ScheduleNotFound,
    ScheduleRefused,
    SchedulesRefused,
    SerializationError,
    ServerNotFoundError,
    ServerStartError,
    ServerVersionError,
    Snooze,
    StalledError,
    StartupError,
    StreamNotFoundError,
    StreamRequestError,
    SubjectTaken,
    TaskControl,
    TopologyError,
    UnsupportedColumnError,
    WorkflowFailed,
    WriteRefused,
)
from ._lifecycle.state import JobError, JobState, JobStatus
from ._observability.logging import add_job_context
from ._registry.entries import WorkerEntry, live_workers
from ._scheduling.admin import Schedules
from ._version import __version__

# `import jsworker.errors` (a module of an earlier release) names where its names went.
_moved.install()

if TYPE_CHECKING:
    from ._cli.loader import AppNotFound
    from .admin import Admin

# Names whose modules `import jsworker` does not load otherwise (the admin API reads dead
# letters; one exception is still defined in the command line's module): imported when
# first asked for.
_LAZY = {
    "Admin": ".admin",
    "AppNotFound": "._cli.loader",
}

if not TYPE_CHECKING:  # the checker sees the imports above instead
    __getattr__ = lazy_getattr(__name__, _LAZY, globals())


def __dir__() -> list[str]:
    """The module's names, those imported on first use included."""
    return sorted({*globals(), *_LAZY})


__all__ = [
    "Admin",
    "ApiError",
    "App",
    "AppNotFound",
    "BadRowError",
    "ConfigurationError",
    "ConnectError",
    "ConsumeError",
    "DeadLetterNotFound",
    "DeadLetterNotReplayable",
    "EnqueueError",
    "EventsNotFound",
    "HistoryError",
    "JSONSerializer",
    "Job",
    "JobCancelled",
    "JobContext",
    "JobError",
    "JobExpired",
    "JobFailed",
    "JobNotFound",
    "JobState",
    "JobStatus",
    "JobTimeout",
    "JsworkerError",
    "LimitsStreamError",
    "Middleware",
    "NoStreamError",
    "NoWorkerRunning",
    "OutgoingJob",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "PortInUseError",
    "ProcessExited",
    "ProvisioningNeeded",
    "RefusedError",
    "Reject",
    "Retry",
    "ScheduleNotFound",
    "ScheduleRefused",
    "Schedules",
    "SchedulesRefused",
    "SerializationError",
    "Serializer",
    "ServerNotFoundError",
    "ServerStartError",
    "ServerVersionError",
    "Settled",
    "Snooze",
    "StalledError",
    "StartupError",
    "StreamNotFoundError",
    "StreamRequestError",
    "SubjectTaken",
    "Task",
    "TaskControl",
    "TopologyError",
    "UnsupportedColumnError",
    "WorkerEntry",
    "WorkflowFailed",
    "WriteRefused",
    "__version__",
    "add_job_context",
    "current_job",
    "live_workers",
]
