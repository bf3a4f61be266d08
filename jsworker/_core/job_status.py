"""Where a job is in its lifecycle, as callers see it: its state and its status.

::

    scheduled ──fires──▶ queued ──delivered──▶ running ──returns──▶ succeeded
                          │  ▲                   │ │
                          │  └──── retrying ◀────┘ └──raises, no attempts left──▶ failed
                          │       (nak + delay)
                          ├──not started in time──▶ expired
                          └──cancel (from scheduled, queued, retrying or running)──▶ cancelled

Part of the core (a :class:`~jsworker.Job` handle and the producer read it); the records that
tell it are the lifecycle feature's (:mod:`jsworker._lifecycle`).
"""

from __future__ import annotations

import enum
import traceback
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from .._errors import SerializationError


class JobState(enum.StrEnum):
    """Where a job is in its lifecycle."""

    SCHEDULED = "scheduled"  # a delayed job waiting on the server for its time
    QUEUED = "queued"  # in its queue, not handed to a worker yet
    RUNNING = "running"  # handed to a worker, not settled
    RETRYING = "retrying"  # failed an attempt, waiting for the next
    SNOOZED = "snoozed"  # put back by its task (Snooze), waiting for its time: no failure
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # dead-lettered
    CANCELLED = "cancelled"
    EXPIRED = "expired"  # not started within its expiry: never run
    UNKNOWN = "unknown"  # no trace of it: never enqueued, or finished and forgotten

    @property
    def resting(self) -> bool:
        """True for a job handed back to wait for its next run: retrying, or snoozed."""
        return self in _RESTING

    @property
    def finished(self) -> bool:
        """True for the states a job never leaves."""
        return self in _FINISHED


_FINISHED = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.EXPIRED})
_RESTING = frozenset({JobState.RETRYING, JobState.SNOOZED})

#: What a status may be limited to: ``scheduled`` (only a delayed job's schedule is looked
#: for) or ``waiting`` (only a message waiting or running); the rest reads as ``unknown``. A
#: unique enqueue asks only for the form it does not check itself: one read instead of four.
Form = Literal["scheduled", "waiting"]


#: A failure's message is cut to this many characters, and its traceback to its last this many
#: (where the error is), wherever they are kept (a record, a dead letter, an error callback's
#: details): a huge one must not make what carries it unstorable.
MAX_MESSAGE = 1000
MAX_TRACEBACK = 8000


@dataclass(frozen=True, slots=True)
class JobError:
    """Why a job failed: the exception's type and message, and its traceback when it raised."""

    type: str
    message: str
    traceback: str | None = None

    @classmethod
    def of(cls, exc: BaseException, fallback: str = "") -> JobError:
        """``exc`` as kept (``fallback`` for an exception with no message), its texts cut."""
        text = None
        if exc.__traceback__ is not None:
            text = "".join(traceback.format_exception(exc))[-MAX_TRACEBACK:]
        return cls(type(exc).__qualname__, (str(exc) or fallback)[:MAX_MESSAGE], text)


@dataclass(frozen=True, slots=True)
class JobStatus:
    """What is known of a job: its state and, where the server or a record says, the rest.

    ``attempts`` counts the runs started so far; times are UTC. ``worker`` names the worker
    process (``host:pid``) that settled it; ``error`` is set for ``failed`` and for a
    ``retrying`` job's last failure. ``seq`` is the stream sequence of the job's message
    (this run's, for a unique job whose id comes back), when known.
    """

    id: str
    state: JobState
    queue: str | None = None
    task: str | None = None
    attempts: int | None = None
    scheduled_for: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    next_attempt_at: datetime | None = None
    worker: str | None = None
    error: JobError | None = None
    reason: str | None = None
    seq: int | None = None
    #: How often its task snoozed it (``Snooze``), when it did.
    snoozes: int | None = None
    #: A running job's latest ``set_progress`` (0 to 1) and its message, when it set one.
    progress: float | None = None
    progress_message: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (times as ISO 8601 strings)."""
        out: dict[str, Any] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, JobError):
                value = {"type": value.type, "message": value.message, "traceback": value.traceback}
            out[name] = value
        return out

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> JobStatus:
        """The status :meth:`as_dict` wrote; :class:`SerializationError` when it is not one."""
        try:
            given: dict[str, Any] = {name: doc.get(name) for name in cls.__slots__}
            given["state"] = JobState(doc["state"])
            for name in ("scheduled_for", "started_at", "finished_at", "next_attempt_at"):
                if given[name] is not None:
                    given[name] = datetime.fromisoformat(given[name])
            error = given["error"]
            if error is not None:
                given["error"] = JobError(str(error["type"]), str(error["message"]), error.get("traceback"))
            return cls(**given)
        except (ValueError, KeyError, TypeError) as exc:
            raise SerializationError(f"not a job status: {exc}") from exc
