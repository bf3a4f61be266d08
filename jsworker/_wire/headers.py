"""Header names of jsworker's messages: the wire format, in one place.

A job is a message on ``jsw.<app>.q.<queue>.<task>`` whose body is the serializer's encoding
of ``{"args": [...], "kwargs": {...}}``. A dead letter keeps the job's body and headers and
adds the ``Jsw-Dlq-*`` headers.
"""

from collections.abc import Mapping

MSG_ID = "Nats-Msg-Id"
"""The server's dedup key; the job id for jobs enqueued once."""

JOB_ID = "Jsw-Job-Id"
"""The job id when it differs from the dedup key (replayed jobs, dead letters)."""

TASK = "Jsw-Task"
ENQUEUED_AT = "Jsw-Enqueued-At"
"""Unix time in nanoseconds when the producer sent the job."""

CONTENT_TYPE = "Content-Type"

EXPIRES_AT = "Jsw-Expires-At"
"""Unix milliseconds after which the job must not start (``expires``)."""
UNIQUE = "Jsw-Unique"
"""Set on a unique job: its id is derived from its key and names one job at a time."""

QUEUE = "Jsw-Queue"
PARTITION = "Jsw-Partition"
"""On a job waiting for its turn on a fair queue: a hash of its partition key."""
MOVED = "Jsw-Moved"
"""On what is left of a job that waited for its turn once it moved into its queue."""
MSG_TTL = "Nats-TTL"
"""A message's time to live (streams that allow it)."""
ORIGINAL_SUBJECT = "Jsw-Original-Subject"
DLQ_REASON = "Jsw-Dlq-Reason"
DLQ_ATTEMPTS = "Jsw-Dlq-Attempts"
DLQ_AT = "Jsw-Dlq-At"
DLQ_ERROR_TYPE = "Jsw-Dlq-Error-Type"
DLQ_ERROR = "Jsw-Dlq-Error"
DLQ_TRACEBACK = "Jsw-Dlq-Traceback"
"""The traceback as a JSON string (headers cannot hold newlines)."""
BODY_TRUNCATED = "Jsw-Dlq-Body-Truncated"
"""Original body size, when the body had to be cut to fit the dead letter under max_payload."""
HEADERS_DROPPED = "Jsw-Dlq-Headers-Dropped"
"""Names of the job's own headers left out so that the dead letter's headers fit (64 KiB)."""
DLQ_PREFIX = "Jsw-Dlq-"
"""Headers with this prefix are written by the worker only; a job's own are dropped."""

# -- schedules (ADR-51): the server's headers, and jsworker's on schedule messages ----------

SCHEDULE = "Nats-Schedule"
"""``@at <time>``, ``@every <duration>`` or a six-field cron: the message is a schedule."""
SCHEDULE_TARGET = "Nats-Schedule-Target"
SCHEDULE_TIME_ZONE = "Nats-Schedule-Time-Zone"
SCHEDULER = "Nats-Scheduler"
"""Set by the server on a fired message: the subject of the schedule that fired it."""
SCHEDULE_NEXT = "Nats-Schedule-Next"
"""Set by the server on a fired message: ``purge`` (fired once) or the next fire time."""
EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_SUBJECT_SEQ_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
"""The subject (wildcards allowed) :data:`EXPECTED_LAST_SUBJECT_SEQ` is checked on (2.11+)."""
ROLLUP = "Nats-Rollup"

SCHEDULED_FOR = "Jsw-Scheduled-For"
"""Unix milliseconds a delayed job is due at (kept on the fired job)."""
SCHEDULE_NAME = "Jsw-Schedule"
"""The periodic schedule a message belongs to (kept on the jobs it fires)."""
SCHEDULE_SPEC = "Jsw-Schedule-Spec"
"""The schedule's expression as the server reads it (kept on fired jobs, which lose ``Nats-Schedule``)."""
SCHEDULE_ZONE = "Jsw-Schedule-Zone"
SCHEDULE_DIGEST = "Jsw-Schedule-Digest"
"""Fingerprint of a periodic schedule's declaration: equal means nothing to update."""
TICK_EXPIRES = "Jsw-Tick-Expires"
"""On a periodic schedule (and the ticks it fires): seconds after its due time past which a
tick not started yet is not run, ``next`` (once the next tick is due) or ``never``."""
FIRED_BY = "Jsw-Fired-By"
"""Set by the worker that moved a fired job into its queue: the subject of the schedule that
fired it (the server's ``Nats-Scheduler``, which a stream without schedules refuses)."""
FIRED_NEXT = "Jsw-Fired-Next"
"""Set with :data:`FIRED_BY`: the server's ``Nats-Schedule-Next`` of the firing."""
FIRED_CLAIM = "Jsw-Fired-Claim"
"""Set with :data:`FIRED_BY`: what the moving worker wrote in the firing's claim; a fired job
runs only while the claim still says so (see :mod:`jsworker._scheduling.claims`)."""
PAUSED = "Jsw-Paused"
"""On the message that stands in for a paused schedule (it has no ``Nats-Schedule``)."""


#: Header names a caller may not set on a job: the server's and jsworker's own.
RESERVED_PREFIXES = ("nats-", "jsw-")
# A header name is a token (RFC 9110): no spaces, colons or control characters.
_HEADER_NAME = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
#: The most bytes a caller's own headers may take (names and values): the server holds a
#: message's whole header block to 64 KiB, and jsworker's own and a dead letter's need room.
MAX_CALLER_HEADERS = 16 * 1024


def check_headers(headers: object) -> dict[str, str]:
    """A caller's own job headers as a dict; ValueError naming what is wrong: not a mapping of
    strings, a name that is no header token or is reserved (``Nats-*``, ``Jsw-*``), a value
    with a line break, or more than :data:`MAX_CALLER_HEADERS` bytes in all."""
    if not isinstance(headers, Mapping):
        raise ValueError(f"headers must be a mapping of str to str, not {type(headers).__name__}")
    out: dict[str, str] = {}
    size = 0
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise ValueError(f"headers must map str to str, not {name!r:.60}: {type(value).__name__}")
        if not name or not set(name) <= _HEADER_NAME:
            raise ValueError(f"header name {name!r:.60} is not a header token (letters, digits, '-', ...)")
        if name.lower().startswith(RESERVED_PREFIXES):
            raise ValueError(
                f"header {name!r:.60} is reserved: names starting Nats- or Jsw- are the server's "
                "and jsworker's"
            )
        if "\r" in value or "\n" in value:
            raise ValueError(f"header {name!r:.60}: a value cannot hold a line break")
        size += len(name.encode()) + len(value.encode()) + 4
        out[name] = value
    if size > MAX_CALLER_HEADERS:
        raise ValueError(f"headers take {size} bytes, more than the {MAX_CALLER_HEADERS} allowed")
    return out


def caller_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers of a message that its caller set (``apply(headers=...)``): all but the
    server's, jsworker's own and ``Content-Type``."""
    return {
        k: v for k, v in headers.items() if k != CONTENT_TYPE and not k.lower().startswith(RESERVED_PREFIXES)
    }


def job_id_of(headers: Mapping[str, str], seq: int) -> str:
    """The job id of the job message stored at ``seq`` with ``headers``: its own header, else
    its dedup key, else (a hand-made message with neither) one made of its sequence."""
    # The worker reads it inline on its hot path (jsworker/_runtime/execution.py), alike.
    return headers.get(JOB_ID) or headers.get(MSG_ID) or f"seq-{seq}"
