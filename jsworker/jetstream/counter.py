"""Counters (nats-server 2.12+, streams with ``allow_msg_counter``): a message with
``Nats-Incr`` adds to its subject's total, which the server keeps and returns, so that many
writers count together without reading first."""

from __future__ import annotations

from .._errors import WriteRefused
from .api import REQUEST_ERRORS, classify, parse_reply
from .connection import Connection

_INCR = "Nats-Incr"
_MSG_ID = "Nats-Msg-Id"


async def increment(conn: Connection, subject: str, by: int = 1, *, dedup: str | None = None) -> int | None:
    """Add ``by`` to the counter of ``subject``; the new total, or None when ``dedup`` (a
    message id) was counted before, inside the stream's duplicate window."""
    headers = {_INCR: str(by)}
    if dedup is not None:
        headers[_MSG_ID] = dedup
    try:
        answer = await conn.nc.request(subject, b"", timeout=5.0, headers=headers)
        reply = parse_reply(answer.data, answer.headers)
    except REQUEST_ERRORS as exc:
        failure = classify(exc)
        raise WriteRefused(f"cannot count on {subject}: {failure.text}", failure.err_code,
                           transient=failure.transient) from exc  # fmt: skip
    if reply.get("duplicate"):
        return None
    return int(reply["val"])
