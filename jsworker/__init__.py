"""jsworker: a task queue on NATS JetStream.

Declare work with :meth:`App.task`, enqueue with ``task.delay(...)`` (sync) or
``await task.adelay(...)`` (async), run it with ``jsworker run module``.

Every exception jsworker raises is importable from here (all defined in :mod:`jsworker.errors`,
under :class:`JsworkerError`), as is :func:`live_workers`, the live worker processes of an app
as ``jsworker workers`` shows them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .app import App
from .errors import (
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
from .job import Job, JobContext, current_job
from .lifecycle.state import JobError, JobState, JobStatus
from .middleware import Middleware, OutgoingJob, Settled
from .scheduling.admin import Schedules
from .serializers import JSONSerializer, Serializer
from .task import Task
from .workers import WorkerEntry, live_workers

if TYPE_CHECKING:
    from .admin import Admin
    from .cli.loader import AppNotFound

# Names whose modules `import jsworker` does not load otherwise (the admin API reads dead
# letters; one exception is still defined in the command line's module): imported when
# first asked for.
_LAZY = {
    "Admin": ".admin",
    "AppNotFound": ".cli.loader",
}

if not TYPE_CHECKING:  # the checker sees the imports above instead

    def __getattr__(name: str) -> Any:
        """The names of :data:`_LAZY`, imported on first use (PEP 562)."""
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value
        return value


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
    "current_job",
    "live_workers",
]
