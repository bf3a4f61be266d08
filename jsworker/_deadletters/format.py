"""Dead letters: the stored record of a job that will never run again.

The body is the job's original payload, byte for byte, so it can be inspected and replayed;
the job's original headers are kept, and what went wrong is added as ``Jsw-Dlq-*`` headers.
Its ``Nats-Msg-Id`` is ``<job id>:<attempt>``: if the worker dies between storing the dead
letter and terminating the job, the job is redelivered and stored again without a double.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Mapping

from .._core.job_status import MAX_TRACEBACK
from .._errors import ConfigurationError
from .._wire.headers import (
    BODY_TRUNCATED,
    DLQ_AT,
    DLQ_ATTEMPTS,
    DLQ_ERROR,
    DLQ_ERROR_TYPE,
    DLQ_PREFIX,
    DLQ_REASON,
    DLQ_TRACEBACK,
    HEADERS_DROPPED,
    JOB_ID,
    MSG_ID,
    ORIGINAL_SUBJECT,
    QUEUE,
    TASK,
)
from .._wire.names import Namespace, validate_name
from ..jetstream.publish import OutMessage

# Nats-* headers steer the server (dedup, expected sequences, TTL, rollup, schedules, batches):
# copied into the dead-letter publish they would make it fail or misbehave. The job id, the only
# one worth keeping, is kept as Jsw-Job-Id.
_SERVER_PREFIX = "nats-"
# A job cannot forge what a dead letter says (its traceback, "cannot be replayed").
_DROPPED_PREFIXES = (_SERVER_PREFIX, DLQ_PREFIX.lower())
# JetStream refuses a message whose header block exceeds 64 KiB (error 10097).
MAX_HEADER_BYTES = 64 * 1024
_MAX_LINE = 1000


def _one_line(text: str, limit: int = _MAX_LINE) -> str:
    # NATS headers are CRLF-delimited: a newline inside a value would end the header block.
    return " ".join(text.split())[:limit]


def task_token(name: str) -> str:
    """The task name as it may appear in a subject; hostile names become ``_invalid``."""
    try:
        return validate_name("task", name)
    except ConfigurationError:
        return "_invalid"


def _header_bytes(headers: Mapping[str, str]) -> int:
    return OutMessage("", b"", headers).size


def _fit_headers(out: dict[str, str], own: list[str]) -> None:
    """Drop the job's own headers, largest first, until the header block fits the server's
    limit; the names dropped are recorded in ``Jsw-Dlq-Headers-Dropped``."""
    # Room for the record of what was dropped (its value is cut to _MAX_LINE characters).
    budget = MAX_HEADER_BYTES - len(HEADERS_DROPPED) - 4 * _MAX_LINE - 4
    if _header_bytes(out) <= MAX_HEADER_BYTES:
        return
    dropped = []
    for name in sorted((n for n in own if n in out), key=lambda n: len(n) + len(out[n]), reverse=True):
        del out[name]
        dropped.append(name)
        if _header_bytes(out) <= budget:
            break
    out[HEADERS_DROPPED] = _one_line(", ".join(dropped))


def dead_letter_message(
    ns: Namespace,
    *,
    subject: str,
    body: bytes,
    headers: Mapping[str, str],
    job_id: str,
    task: str,
    queue: str,
    attempt: int,
    reason: str,
    error: BaseException | None,
    max_payload: int | None = None,
) -> OutMessage:
    """The dead-letter message for a job, made to fit ``max_payload`` when given.

    A job that nearly filled the limit leaves no room for what went wrong: the traceback goes
    first, then the error text, and last the body is cut (``Jsw-Dlq-Body-Truncated`` then
    holds its original size) — a dead letter that cannot be stored would keep the job alive.
    """
    out = {k: v for k, v in headers.items() if not k.lower().startswith(_DROPPED_PREFIXES)}
    kept = list(out)
    written = {
        # The job's own dedup key, not its id: a replayed job keeps its id and starts again at
        # attempt 1, and its next dead letter must not be dropped as a duplicate of the last.
        MSG_ID: _one_line(f"{headers.get(MSG_ID) or job_id}:{attempt}"),
        JOB_ID: _one_line(job_id),
        TASK: _one_line(task) or "_invalid",
        QUEUE: queue,
        ORIGINAL_SUBJECT: subject,
        DLQ_REASON: _one_line(reason),
        DLQ_ATTEMPTS: str(attempt),
        DLQ_AT: str(time.time_ns()),
    }
    out.update(written)
    if error is not None:
        out[DLQ_ERROR_TYPE] = type(error).__qualname__
        out[DLQ_ERROR] = _one_line(str(error))
        tb = "".join(traceback.format_exception(error))[-MAX_TRACEBACK:]
        # JSON keeps the traceback's newlines without putting one in the header.
        out[DLQ_TRACEBACK] = json.dumps(tb)
    # The job's own headers, not the ones set above, are what may be dropped to fit.
    _fit_headers(out, [k for k in kept if k not in written])
    msg = OutMessage(subject=ns.dlq_subject(queue, task_token(task)), body=body, headers=out)
    if max_payload is None:
        return msg
    for optional in (DLQ_TRACEBACK, DLQ_ERROR):
        if msg.size <= max_payload:
            return msg
        out.pop(optional, None)
        msg = OutMessage(msg.subject, body, out)
    if msg.size > max_payload:
        out[BODY_TRUNCATED] = str(len(body))
        room = max(0, max_payload - OutMessage(msg.subject, b"", out).size)
        msg = OutMessage(msg.subject, body[:room], out)
    return msg
