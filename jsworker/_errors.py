"""jsworker's exceptions.

Everything jsworker raises derives from :class:`JsworkerError`; errors from the NATS client are
chained as ``__cause__`` instead of leaking out. :class:`Retry` and :class:`Reject` are not
errors but signals a task raises to steer what happens to its job.

Every public exception is defined here, in one tree, and exported from :mod:`jsworker` (the
modules raising them import them from here, and still offer them under their old names); the
command line's ``AppNotFound`` is the one left in its module for now. This module imports
nothing from jsworker, so any module may import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# A year: longer than any sane retry delay, and far inside what the server's int64 ns holds.
_MAX_DELAY = 365 * 86400.0


class JsworkerError(Exception):
    """Base class of every error jsworker raises."""


class ConfigurationError(JsworkerError):
    """An app, task, queue or option was declared wrongly (bad name, duplicate task, bad value)."""


class ScheduleNotFound(ConfigurationError):
    """No periodic schedule of that name is on the server."""


class ScheduleRefused(ConfigurationError):
    """One schedule could not be installed: the server refused it, or it cannot be sent to
    this server (over ``max_payload``). The other schedules are not affected."""


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What a reconcile did, by schedule name: ``stale`` are on the server but not declared
    (``removed`` when pruned); ``refused`` are declared but were not installed, each with why
    (the server refused it, or it cannot be sent to this server).

    Here because :class:`SchedulesRefused` carries one; a reconcile returns one too.
    """

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


class SchedulesRefused(ConfigurationError):
    """A reconcile installed every schedule it could, but not those in ``report.refused``
    (the message names each with its reason); ``report`` says what was done with the rest."""

    def __init__(self, report: SyncReport) -> None:
        refused = "; ".join(f"{name!r}: {why}" for name, why in report.refused.items())
        installed = len(report.created) + len(report.updated) + len(report.unchanged)
        super().__init__(
            f"{len(report.refused)} schedule(s) not installed ({refused}); the other {installed} are in place"
        )
        self.report = report


class UnsupportedColumnError(ConfigurationError):
    """A column's type cannot be sent as a JSON job argument (:mod:`jsworker.spark`)."""


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
            "permissions (see docs/security.md)"
        )
        self.operation = operation
        self.subject = subject


class ProvisioningNeeded(PermissionDeniedError):
    """A stream of the app (or, when ``consumer`` is given, that consumer of it) is missing
    (``change`` ``"create"``) or differs from what the app declares (``"update"``), and this
    user may not change it: streams and the consumers workers do not make themselves are made
    by the provisioning step (``jsworker provision``), run with the ``provisioner`` role's
    credentials. ``module`` is the app's module when known, for the command to give."""

    def __init__(
        self,
        stream: str,
        change: str,
        subject: str,
        module: str | None = None,
        *,
        consumer: str | None = None,
    ) -> None:
        state = "does not exist" if change == "create" else "differs from what the app declares"
        what = f"stream {stream}" if consumer is None else f"consumer {consumer} of stream {stream}"
        JsworkerError.__init__(
            self,
            f"{what} {state} and this user may not {change} it (refused {subject!r}): "
            f"run `jsworker provision {module or 'MODULE'}` with the provisioner's credentials first "
            "(docs/security.md)",
        )
        self.operation, self.subject = "publish", subject
        self.stream, self.change, self.module = stream, change, module
        self.consumer = consumer

    def of_module(self, module: str) -> ProvisioningNeeded:
        """The same refusal, its command naming app module ``module``."""
        return ProvisioningNeeded(self.stream, self.change, self.subject, module, consumer=self.consumer)


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


class NoStreamError(EnqueueError):
    """No stream holds the subject: the app's topology has not been created yet."""


class PayloadTooLargeError(EnqueueError):
    """Body and headers together exceed the server's ``max_payload``; nothing was sent."""


class StalledError(EnqueueError):
    """No acknowledgement arrived for the pipeline's ``timeout``; the messages without one may
    or may not be stored (publishing them again with the same ids cannot duplicate them)."""


class RefusedError(EnqueueError):
    """The server refused a message (``no_stream``: no stream holds its subject; ``err_code``:
    its JetStream error code, 0 when it gave none)."""

    def __init__(self, message: str, *, no_stream: bool = False, err_code: int = 0) -> None:
        super().__init__(message)
        self.no_stream = no_stream
        self.err_code = err_code


class SubjectTaken(JsworkerError):
    """A message meant for an empty subject found one there (a unique job's key is taken).

    Not an :class:`EnqueueError`: nothing failed, the caller answers with the job that holds
    the subject."""


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


class WriteRefused(TopologyError):
    """The server refused a write; ``err_code`` is its JetStream error code."""

    def __init__(self, message: str, err_code: int, *, transient: bool = False) -> None:
        super().__init__(message, transient=transient)
        self.err_code = err_code


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


# The JetStream API's status for "no such stream, consumer or message".
_NOT_FOUND = 404


@dataclass(frozen=True, slots=True)
class Failure:
    """What went wrong with a JetStream API request.

    ``code`` is the API's status (404, 503, ...) when the server answered, 0 when it did not;
    ``transient`` is True when trying again later may work: no answer, 503 (no leader yet,
    no stream responder during an election or a restart), or a write whose message id is still
    being stored (10158, "duplicate message id is in process").

    Here because :class:`ApiError` carries one.
    """

    text: str
    transient: bool
    code: int = 0
    err_code: int = 0

    @property
    def not_found(self) -> bool:
        """The stream, consumer or message asked for does not exist."""
        return self.code == _NOT_FOUND


class ApiError(JsworkerError):
    """The JetStream API answered with an error (see ``failure``)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.text)
        self.failure = failure


class StreamRequestError(JsworkerError):
    """A request to the JetStream API failed.

    ``transient`` is True when the server did not answer (trying again may work), False when
    it refused the request.
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class LimitsStreamError(StreamRequestError):
    """A request on a stream failed (see ``transient``)."""


class StreamNotFoundError(LimitsStreamError):
    """The stream does not exist: raised only by reads asked to tell that apart from a
    missing message (``stream_required``)."""


class HistoryError(StreamRequestError):
    """Reading a stream's history failed (see ``transient``)."""


class ConsumeError(JsworkerError):
    """The pull loop stopped for good: the consumer was deleted or rejects our requests."""


class DeadLetterNotFound(JsworkerError):
    """No dead letter has that sequence or job id (or it was replayed or purged already)."""


class DeadLetterNotReplayable(JsworkerError):
    """The dead letter cannot become a job again: its body was cut, or it would not fit."""


class EventsNotFound(JsworkerError):
    """The app has no events stream on the server (it never ran with ``App(events=True)``)."""


class NoWorkerRunning(JsworkerError):
    """A user that may only ask the app's workers to do something (the dashboard's cancel)
    asked, and no worker runs to do it."""


class ProcessExited(JsworkerError):
    """The process running a task's call ended before it answered (a crash, ``os._exit``, a
    signal from outside, the OOM killer)."""


class ServerNotFoundError(JsworkerError):
    """No nats-server executable could be found (or the configured one is not executable)."""


class ServerStartError(JsworkerError):
    """A nats-server process did not become ready; the message ends with the tail of its log."""


class PortInUseError(ServerStartError):
    """The fixed port a server was asked to listen on is already taken on 127.0.0.1."""

    def __init__(self, message: str, port: int | None = None) -> None:
        super().__init__(message)
        self.port = port
        """The port found taken, when known."""


class BadRowError(JsworkerError):
    """A row cannot become a job: a null key, or a value JSON cannot hold (NaN, infinity)
    (:mod:`jsworker.spark`)."""


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


class WorkflowFailed(JsworkerError):
    """A workflow ended without its result: a step was dead-lettered, cancelled or expired.

    ``flow_id`` names the workflow, ``step`` the step that ended it (``"2"``: a chain's third
    step, ``"m5"``: a group's sixth member), ``state`` how (``failed``, ``cancelled``,
    ``expired``) and ``reason`` why.
    """

    def __init__(self, flow_id: str, step: str | None, state: str, reason: str) -> None:
        super().__init__(f"workflow {flow_id} {state} at step {step}: {reason}")
        self.flow_id, self.step, self.state, self.reason = flow_id, step, state, reason


class Snooze(TaskControl):
    """Raise inside a task to run the job again in ``delay`` seconds, as if it had not run:
    not a failure and not an attempt (``max_retries`` and ``max_crashes`` do not count it).
    A job's status counts its snoozes (``snoozes``), and so does ``jsworker_jobs_snoozed``."""

    def __init__(self, delay: float, reason: str = "snoozed") -> None:
        super().__init__(reason)
        if not isinstance(delay, int | float) or isinstance(delay, bool) or not 0 <= delay < _MAX_DELAY:
            raise ValueError(f"Snooze delay must be between 0 and {_MAX_DELAY:.0f} seconds, not {delay!r}")
        self.delay = float(delay)
        self.reason = reason
