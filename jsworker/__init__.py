"""jsworker: a task queue on NATS JetStream.

Declare work with :meth:`App.task`, enqueue with ``task.delay(...)`` (sync) or
``await task.adelay(...)`` (async), run it with ``jsworker run module``.
"""

from .app import App
from .errors import (
    ConfigurationError,
    ConnectError,
    EnqueueError,
    JobCancelled,
    JobExpired,
    JobFailed,
    JobNotFound,
    JsworkerError,
    PermissionDeniedError,
    Reject,
    Retry,
    SerializationError,
    ServerVersionError,
    TopologyError,
)
from .job import Job, JobContext, current_job
from .lifecycle.state import JobError, JobState, JobStatus
from .scheduling.admin import Schedules
from .serializers import JSONSerializer, Serializer
from .task import Task

__version__ = "0.1.0"

__all__ = [
    "App",
    "ConfigurationError",
    "ConnectError",
    "EnqueueError",
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
    "JsworkerError",
    "PermissionDeniedError",
    "Reject",
    "Retry",
    "Schedules",
    "SerializationError",
    "Serializer",
    "ServerVersionError",
    "Task",
    "TopologyError",
    "__version__",
    "current_job",
]
