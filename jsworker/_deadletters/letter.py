"""A dead letter as read back from the dead-letter stream."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .._enqueue.receipt import Job
from .._errors import DeadLetterNotFound as DeadLetterNotFound
from .._errors import DeadLetterNotReplayable as DeadLetterNotReplayable
from .._errors import SerializationError
from .._wire import headers as wire
from ..jetstream.limits_stream import StoredMessage

if TYPE_CHECKING:
    pass

_DLQ_PREFIX = "jsw-dlq-"
_SERVER_PREFIX = "nats-"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead letter, as stored in the app's dead-letter stream.

    ``seq`` is its sequence in that stream; ``subject`` is the job's original subject;
    ``headers`` are the job's own headers (everything but ``Jsw-Dlq-*`` and the server's
    ``Nats-*``); ``failed_at`` is unix seconds. ``body`` is the job's payload byte for byte,
    or None when it was not loaded (:meth:`DeadLetters.list` reads headers only unless asked);
    ``size`` is its length either way. ``original_size`` is None unless the worker had to cut
    the body to fit the server's ``max_payload``: then ``body`` is only its start, and the dead
    letter cannot be replayed. ``headers_dropped`` names the job's own headers the worker left
    out so that the dead letter's headers fit the server's 64 KiB (a replay goes without them).
    ``attempts`` is 0 when the worker did not record it.
    """

    seq: int
    job_id: str
    task: str
    queue: str
    attempts: int
    reason: str
    error_type: str | None
    error: str | None
    traceback: str | None
    failed_at: float | None
    subject: str
    headers: Mapping[str, str]
    body: bytes | None
    size: int
    original_size: int | None = None
    headers_dropped: tuple[str, ...] = ()

    @classmethod
    def from_stored(cls, msg: StoredMessage) -> DeadLetter:
        """Read a dead letter out of its stored message, tolerating missing headers."""
        h = msg.headers
        # Subject fallback: jsw.<app>.dlq.<queue>.<task>, for letters missing their headers.
        parts = msg.subject.split(".")
        queue = h.get(wire.QUEUE) or (parts[3] if len(parts) == 5 else "")
        task = h.get(wire.TASK) or (parts[4] if len(parts) == 5 else "")
        return cls(
            seq=msg.seq,
            job_id=job_id_of(msg),
            task=task,
            queue=queue,
            attempts=_int(h.get(wire.DLQ_ATTEMPTS)) or 0,
            reason=h.get(wire.DLQ_REASON, ""),
            error_type=h.get(wire.DLQ_ERROR_TYPE),
            error=h.get(wire.DLQ_ERROR),
            traceback=_traceback(h.get(wire.DLQ_TRACEBACK)),
            failed_at=_failed_at(h.get(wire.DLQ_AT), msg.stored_at),
            subject=h.get(wire.ORIGINAL_SUBJECT, ""),
            headers={k: v for k, v in h.items() if not k.lower().startswith((_DLQ_PREFIX, _SERVER_PREFIX))},
            body=msg.body,
            size=msg.size,
            original_size=_int(h.get(wire.BODY_TRUNCATED)),
            headers_dropped=tuple(n for n in h.get(wire.HEADERS_DROPPED, "").split(", ") if n),
        )

    def payload(self) -> Any:
        """The body decoded as JSON; raises :class:`SerializationError` when it is not JSON."""
        if self.body is None:
            raise SerializationError(
                f"the body of dead letter {self.seq} was not loaded; use DeadLetters.get({self.seq})"
            )
        try:
            return json.loads(self.body)
        except (UnicodeDecodeError, ValueError) as exc:
            raise SerializationError(f"the body of dead letter {self.seq} is not JSON: {exc}") from exc
        except RecursionError:
            raise SerializationError(
                f"the body of dead letter {self.seq} is JSON nested too deeply to decode"
            ) from None

    def pretty_payload(self) -> str:
        """The body for people: indented JSON when it is JSON, else the ``repr`` of the bytes."""
        if self.body is None:
            return "(not loaded)"
        try:
            return json.dumps(self.payload(), indent=2, ensure_ascii=False)
        except SerializationError as exc:
            if "nested too deeply" in str(exc):
                return f"({exc}; {self.size} bytes, starting {self.body[:200]!r})"
            return repr(self.body)
        except RecursionError:  # decoded, yet too deep to indent
            return (
                f"(JSON nested too deeply to show indented; {self.size} bytes, starting {self.body[:200]!r})"
            )

    @property
    def failed_at_iso(self) -> str | None:
        """``failed_at`` as ISO 8601 in UTC, to the second (``2025-01-31T12:00:00Z``)."""
        if self.failed_at is None:
            return None
        return datetime.fromtimestamp(self.failed_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class ReplayedJob(Job):
    """Receipt of a replayed dead letter: a :class:`Job`, plus the dead letter's sequence."""

    replayed_from: int = 0


def job_id_of(msg: StoredMessage) -> str:
    """The job id of a stored dead letter; its dedup key is ``<job id>:<attempt>``."""
    return (
        msg.headers.get(wire.JOB_ID)
        or msg.headers.get(wire.MSG_ID, "").rpartition(":")[0]
        or f"dlq-{msg.seq}"
    )


def _int(raw: str | None) -> int | None:
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _traceback(raw: str | None) -> str | None:
    if raw is None:
        return None
    try:
        text = json.loads(raw)
    except ValueError:
        return raw  # not what the worker writes, but still worth showing as it is
    return text if isinstance(text, str) else raw


def _failed_at(raw: str | None, stored_at: float | None) -> float | None:
    ns = _int(raw)
    return ns / 1e9 if ns is not None else stored_at
