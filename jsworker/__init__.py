"""jsworker: a task queue on NATS JetStream.

Declare work with :meth:`App.task`, enqueue with ``task.delay(...)`` (sync) or
``await task.adelay(...)`` (async), run it with ``jsworker run module``.

Every exception jsworker raises is importable from here (those of the optional Spark
support from :mod:`jsworker.spark`), as is :func:`live_workers`, the live worker processes of
an app as ``jsworker workers`` shows them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .app import App
from .errors import (
    ConfigurationError,
    ConnectError,
    EnqueueError,
    JobCancelled,
    JobExpired,
    JobFailed,
    JobNotFound,
    JobTimeout,
    JsworkerError,
    PermissionDeniedError,
    Reject,
    Retry,
    SerializationError,
    ServerVersionError,
    StartupError,
    TaskControl,
    TopologyError,
)
from .fleet.registry import WorkerEntry, live_workers
from .jetstream.api import ApiError, StreamRequestError
from .jetstream.limits_stream import LimitsStreamError, StreamNotFoundError
from .jetstream.message import NoStreamError, PayloadTooLargeError
from .jetstream.pipeline import RefusedError, StalledError
from .jetstream.publish import SubjectTaken
from .jetstream.stored import WriteRefused
from .job import Job, JobContext, current_job
from .lifecycle.state import JobError, JobState, JobStatus
from .scheduling.admin import Schedules
from .scheduling.periodic import ScheduleNotFound, ScheduleRefused, SchedulesRefused
from .serializers import JSONSerializer, Serializer
from .task import Task

if TYPE_CHECKING:
    from .cli.loader import AppNotFound
    from .deadletters.letter import DeadLetterNotFound, DeadLetterNotReplayable
    from .events.reader import EventsNotFound
    from .jetstream.consume import ConsumeError
    from .jetstream.history import HistoryError
    from .runtime.processes import ProcessExited
    from .server.binary import ServerNotFoundError
    from .server.process import PortInUseError, ServerStartError

# Exceptions of modules that `import jsworker` does not load otherwise (the command line, the
# worker's process pool, the local server, the dead-letter and event readers): each is
# imported when first asked for, so that importing jsworker costs no more for them.
_LAZY = {
    "AppNotFound": ".cli.loader",
    "ConsumeError": ".jetstream.consume",
    "DeadLetterNotFound": ".deadletters.letter",
    "DeadLetterNotReplayable": ".deadletters.letter",
    "EventsNotFound": ".events.reader",
    "HistoryError": ".jetstream.history",
    "PortInUseError": ".server.process",
    "ProcessExited": ".runtime.processes",
    "ServerNotFoundError": ".server.binary",
    "ServerStartError": ".server.process",
}

if not TYPE_CHECKING:  # the checker sees the imports above instead

    def __getattr__(name: str) -> Any:
        """The exceptions of :data:`_LAZY`, imported on first use (PEP 562)."""
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
    "ApiError",
    "App",
    "AppNotFound",
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
    "NoStreamError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "PortInUseError",
    "ProcessExited",
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
    "StalledError",
    "StartupError",
    "StreamNotFoundError",
    "StreamRequestError",
    "SubjectTaken",
    "Task",
    "TaskControl",
    "TopologyError",
    "WorkerEntry",
    "WriteRefused",
    "__version__",
    "current_job",
    "live_workers",
]
