"""One line of a job listing (:class:`JobSummary`), made from what the server holds."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from .._core.paging import Page
from .._deadletters.letter import DeadLetter
from .._lifecycle.lookup import WAITING_TURN
from .._lifecycle.state import JobRecord, JobState
from .._scheduling.firing import firing
from .._wire.headers import ENQUEUED_AT, FIRED_BY, TASK, job_id_of
from .._wire.names import Namespace
from ..jetstream.limits_stream import StoredMessage

#: The states :meth:`Admin.jobs <jsworker.admin.Admin.jobs>` lists: the ones a job is in
#: while the server holds it (``failed``: its dead letter). ``reserved`` lists jobs handed to a
#: worker that has not started them (queued, each with the reason), apart from ``queued``,
#: those no worker has taken yet.
ListedState = Literal[
    "scheduled", "queued", "reserved", "running", "retrying", "failed", "succeeded", "cancelled", "expired"
]
LISTED_STATES: tuple[ListedState, ...] = (
    "scheduled",
    "queued",
    "reserved",
    "running",
    "retrying",
    "failed",
    "succeeded",
    "cancelled",
    "expired",
)


@dataclass(frozen=True, slots=True)
class JobSummary:
    """One job of a listing, as far as the listing reads it (times in UTC).

    ``seq`` is the sequence of what was read: the job's message in the job stream (queued,
    running, retrying), its schedule's (scheduled), its dead letter's in the dead-letter
    stream (failed), or its last event's in the job-events stream (succeeded, cancelled,
    expired). ``enqueued_at`` is when the producer sent it; ``scheduled_for`` when a
    delayed job is (or was) due. ``attempts`` is known for running, retrying and failed jobs
    (a running job's from the worker holding it). ``worker`` is the worker registry's id of
    the worker running or holding it (``host:pid`` when its entry is not found).
    ``next_attempt_at`` and ``reason`` come with a retrying job, ``finished_at`` and ``reason``
    with a failed one, ``reason`` with a queued one waiting for its partition's turn on a fair
    queue, and with a reserved one (listed as queued) why it has not started: in its worker's
    buffer, held back for a limit (a task's rate, a partition's lease), waiting for a task
    process, or held by no worker that answers.
    """

    id: str
    state: JobState
    queue: str
    task: str
    seq: int
    attempts: int | None = None
    enqueued_at: datetime | None = None
    scheduled_for: datetime | None = None
    started_at: datetime | None = None
    next_attempt_at: datetime | None = None
    finished_at: datetime | None = None
    worker: str | None = None
    reason: str | None = None
    #: A running job's latest ``set_progress`` (0 to 1) and its message.
    progress: float | None = None
    progress_message: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (times as ISO 8601 strings)."""
        out: dict[str, Any] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            out[name] = value.isoformat() if isinstance(value, datetime) else value
        return out


#: A page of :class:`JobSummary`.
JobPage = Page[JobSummary]


@dataclass(frozen=True, slots=True)
class RunningJobs:
    """The jobs workers hold, running or reserved (see :class:`JobSummary`), by the registry
    id (or ``host:pid``) of the worker holding each.

    ``unheld`` are jobs handed out that no worker says it holds: their worker is gone (they are
    handed out again after their ``ack_wait``) or did not answer in time. ``more`` is True when
    there were more running jobs than were read; ``reads`` what the listing cost the server.
    """

    workers: dict[str, tuple[JobSummary, ...]]
    unheld: tuple[JobSummary, ...] = ()
    more: bool = False
    reads: int = 0

    @classmethod
    def of(cls, page: JobPage) -> RunningJobs:
        """The running jobs of ``page`` grouped by worker, each worker's in the page's order."""
        workers: dict[str, list[JobSummary]] = {}
        unheld: list[JobSummary] = []
        for job in page.items:
            if job.worker:
                workers.setdefault(job.worker, []).append(job)
            else:
                unheld.append(job)
        grouped = {worker: tuple(jobs) for worker, jobs in workers.items()}
        return cls(grouped, tuple(unheld), page.next_after is not None, page.reads)


def utc(seconds: float | None) -> datetime | None:
    """Unix seconds as a UTC datetime (None stays None)."""
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def enqueued_at(headers: Any, fallback: float | None = None) -> datetime | None:
    """When the producer sent a job (its ``Jsw-Enqueued-At``), else ``fallback`` (unix seconds)."""
    raw = headers.get(ENQUEUED_AT)
    if isinstance(raw, str) and raw.isdigit():
        return utc(int(raw) / 1e9)
    return utc(fallback)


def job_id_in(msg: StoredMessage) -> str:
    """The id a worker runs the job stored as ``msg`` under.

    As a worker reads it (``jsworker._runtime.execution.as_job_run``): a subject with the id
    (``...q.<queue>.<task>.<id>``) names it, a unique task's tick included; a periodic tick
    fired to its task's subject gets the id of its firing; else the headers say it.
    """
    parts = msg.subject.split(".")
    if len(parts) == 6 and parts[5]:
        return parts[5]
    headers = msg.headers
    fired = firing(headers) if FIRED_BY in headers else None
    if fired is not None:
        return fired.job_id
    return job_id_of(headers, msg.seq)


def waiting_job(ns: Namespace, msg: StoredMessage, state: JobState) -> JobSummary:
    """The summary of the job message ``msg`` in ``state``, from its subject and headers."""
    queue, task = ns.parse_job_subject(msg.subject) or ("", "")
    return JobSummary(
        id=job_id_in(msg),
        state=state,
        queue=queue,
        task=msg.headers.get(TASK) or task,
        seq=msg.seq,
        enqueued_at=enqueued_at(msg.headers, msg.stored_at),
    )


def turn_job(ns: Namespace, msg: StoredMessage) -> JobSummary:
    """The summary of a job waiting in a fair queue's intake for its partition's turn."""
    queue, task = ns.parse_intake_subject(msg.subject) or ("", "")
    return JobSummary(
        id=job_id_in(msg),
        state=JobState.QUEUED,
        queue=queue,
        task=msg.headers.get(TASK) or task,
        seq=msg.seq,
        enqueued_at=enqueued_at(msg.headers, msg.stored_at),
        reason=WAITING_TURN,
    )


def dead_job(letter: DeadLetter) -> JobSummary:
    """The summary of the failed job ``letter`` keeps."""
    return JobSummary(
        id=letter.job_id,
        state=JobState.FAILED,
        queue=letter.queue,
        task=letter.task,
        seq=letter.seq,
        attempts=letter.attempts or None,
        enqueued_at=enqueued_at(letter.headers),
        finished_at=utc(letter.failed_at),
        reason=letter.reason or None,
    )


def retrying_job(job: JobSummary, record: JobRecord) -> JobSummary:
    """``job`` (waiting out a retry's delay or a snooze) with what its record says: attempts,
    next attempt, and why."""
    error = record.error
    return dataclasses.replace(
        job,
        attempts=record.attempts or None,
        next_attempt_at=utc(record.next_attempt_at),
        reason=record.reason or (f"{error.type}: {error.message}" if error is not None else None),
    )


def delayed_job(job_id: str, queue: str, due_ms: int, msg: StoredMessage) -> JobSummary:
    """The summary of delayed job ``job_id`` of ``queue``, due at ``due_ms`` (unix ms), from
    its schedule ``msg``."""
    return JobSummary(
        id=job_id,
        state=JobState.SCHEDULED,
        queue=queue,
        task=msg.headers.get(TASK, ""),
        seq=msg.seq,
        enqueued_at=enqueued_at(msg.headers, msg.stored_at),
        scheduled_for=utc(due_ms / 1000),
    )
