"""jsworker's exceptions.

Everything jsworker raises derives from :class:`JsworkerError`; errors from the NATS client are
chained as ``__cause__`` instead of leaking out. :class:`Retry` and :class:`Reject` are not
errors but signals a task raises to steer what happens to its job.
"""

from __future__ import annotations

# A year: longer than any sane retry delay, and far inside what the server's int64 ns holds.
_MAX_DELAY = 365 * 86400.0


class JsworkerError(Exception):
    """Base class of every error jsworker raises."""


class ConfigurationError(JsworkerError):
    """An app, task, queue or option was declared wrongly (bad name, duplicate task, bad value)."""


class ConnectError(JsworkerError):
    """The NATS servers could not be reached (or refused the credentials)."""


class PermissionDeniedError(JsworkerError):
    """The server refused this connection's user a publish or a subscription it needed.

    ``operation`` is ``"publish"`` or ``"subscribe"``; ``subject`` is the subject refused. Not
    transient: trying again with the same user is refused again.
    """

    def __init__(self, operation: str, subject: str) -> None:
        super().__init__(
            f"permission denied: the NATS server refused to let this user {operation} "
            f"{'to' if operation == 'publish' else 'on'} {subject!r}; grant it in the user's "
            "permissions (see the README's Security section)"
        )
        self.operation = operation
        self.subject = subject


class EnqueueError(JsworkerError):
    """A job could not be enqueued: no server, no stream, or no acknowledgement in time.

    ``job_id`` is the id of the job the call tried to store (None for a bulk call). When this
    is raised after a timeout the job may already be stored, or be stored later: with the
    connection down its message waits in the client's send buffer and goes out when the
    server is back. Enqueueing it again with the same job id (``job_id=err.job_id``) cannot
    make a second job.
    """

    def __init__(self, message: str, *, job_id: str | None = None) -> None:
        super().__init__(message)
        self.job_id = job_id


class JobTimeout(JsworkerError, TimeoutError):
    """A run took longer than its task's ``timeout``. Retried like any exception the task's
    ``retry_on``/``dont_retry_on`` allow: ``dont_retry_on=(JobTimeout,)`` dead-letters a
    job at its first timeout."""


class TopologyError(JsworkerError):
    """A stream or consumer could not be created or does not match what the app declares.

    ``transient`` is True when trying again later may work (no answer from the server, no
    JetStream leader yet), False when the server refused (a conflicting stream, bad settings).
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class ServerVersionError(JsworkerError):
    """The connected nats-server is too old for a feature that was asked for."""


class SerializationError(JsworkerError):
    """Arguments could not be encoded, or a message body could not be decoded."""


class JobNotFound(JsworkerError):
    """No job with that id is known: never enqueued, or finished and no record kept of it."""


class JobFailed(JsworkerError):
    """The job was dead-lettered. ``error_type``, ``error_message`` and ``traceback`` describe
    the exception of its last attempt (None when it never ran: bad input, an unknown task)."""

    def __init__(
        self,
        job_id: str,
        reason: str,
        error_type: str | None = None,
        error_message: str | None = None,
        traceback: str | None = None,
    ) -> None:
        super().__init__(f"job {job_id} failed: {reason}")
        self.job_id = job_id
        self.reason = reason
        self.error_type = error_type
        self.error_message = error_message
        self.traceback = traceback


class JobCancelled(JsworkerError):
    """The job was cancelled (``app.cancel``) and has no result."""

    def __init__(self, job_id: str, reason: str = "cancelled") -> None:
        super().__init__(f"job {job_id} was {reason}")
        self.job_id = job_id
        self.reason = reason


class JobExpired(JobCancelled):
    """The job was not started within its ``expires`` and was never run."""


class TaskControl(Exception):
    """Base of the signals a task raises to decide its job's fate."""


class Retry(TaskControl):
    """Raise inside a task to run the job again later.

    ``delay`` (seconds) overrides the task's backoff for this retry. The retry still counts
    against ``max_retries``; when none are left the job goes to the dead-letter stream.
    """

    def __init__(self, delay: float | None = None, reason: str = "retry requested") -> None:
        super().__init__(reason)
        if delay is not None and not 0 <= delay < _MAX_DELAY:
            raise ValueError(f"Retry delay must be between 0 and {_MAX_DELAY:.0f} seconds, not {delay!r}")
        self.delay = delay
        self.reason = reason


class Reject(TaskControl):
    """Raise inside a task to end the job without retrying; it goes to the dead-letter stream."""

    def __init__(self, reason: str = "rejected") -> None:
        super().__init__(reason)
        self.reason = reason


class StartupError(JsworkerError):
    """An ``@app.on_startup`` hook raised: the worker stops before its first job (exit code 1)."""
