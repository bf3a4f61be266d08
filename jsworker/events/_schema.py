"""The job-event record and its JSON form (the wire format of ``JSW_<APP>_EVENTS``)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

EventKind = Literal[
    "enqueued",
    "scheduled",
    "cancelled",
    "expired",
    "started",
    "succeeded",
    "failed",
    "retried",
    "dead_lettered",
]
EVENT_KINDS: tuple[str, ...] = get_args(EventKind)

#: Bumped when a field changes meaning; readers skip versions they do not know.
VERSION = 1
#: Reasons are cut to this many characters: events are for counting, not for debugging.
MAX_REASON = 200


@dataclass(frozen=True, slots=True)
class JobEvent:
    """One step in a job's life. Times are unix seconds (floats), durations seconds.

    ``attempt`` is the server's delivery count (None for ``enqueued``); ``queue_wait`` (on
    ``started``) is the time from enqueue to this run's start, backoff included on retries;
    ``duration`` (on ``succeeded`` and ``failed``) is how long the run took; ``outcome`` (on
    ``failed`` and ``dead_lettered``) is why: ``failed``, ``timed_out``, ``retry``,
    ``rejected``, ``cancelled``, ``bad_input`` or ``poison``; ``delay`` (on ``retried``) is
    the backoff before the next attempt, and on ``scheduled`` (a delayed job stored by a
    producer) the seconds until it is due; ``cancelled`` is a delayed job removed before it
    fired; ``worker`` names the process (``host:pid``).
    """

    event: str
    job_id: str
    task: str
    queue: str
    ts: float
    attempt: int | None = None
    worker: str | None = None
    enqueued_at: float | None = None
    queue_wait: float | None = None
    duration: float | None = None
    outcome: str | None = None
    reason: str | None = None
    delay: float | None = None
    #: On ``enqueued`` and ``scheduled``: the caller's own headers (``apply(headers=...)``).
    headers: dict[str, str] | None = None


_FIELDS = tuple(JobEvent.__dataclass_fields__)


def encode_event(event: JobEvent) -> bytes:
    """Compact JSON with the fields that are set (None fields are left out)."""
    record: dict[str, Any] = {"v": VERSION}
    record.update((k, v) for k, v in asdict(event).items() if v is not None)
    return json.dumps(record, separators=(",", ":")).encode()


def decode_event(data: bytes) -> JobEvent | None:
    """The event in ``data``; None for anything that is not a version-1 event record."""
    try:
        record = json.loads(data)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("v") != VERSION:
        return None
    try:
        return JobEvent(**{k: record[k] for k in _FIELDS if k in record})
    except TypeError:
        return None
