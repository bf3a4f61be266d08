"""Reading, writing and deleting single messages of a stream by subject: what schedules and
claims are built on (one message a subject, replaced or created only when the subject is
where the writer last saw it)."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..errors import TopologyError
from .api import REQUEST_ERRORS, api_subject, classify, parse_reply, request_json
from .connection import Connection
from .message import Stored, stored_from
from .topology import topology_error

_WRONG_LAST_SEQUENCE = (10071, 10164)


class SubjectMoved(Exception):
    """A write expecting a subject's last sequence found another one: somebody wrote first."""


class WriteRefused(TopologyError):
    """The server refused a write; ``err_code`` is its JetStream error code."""

    def __init__(self, message: str, err_code: int, *, transient: bool = False) -> None:
        super().__init__(message, transient=transient)
        self.err_code = err_code


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One message as the stream holds it."""

    subject: str
    seq: int
    headers: Mapping[str, str]
    body: bytes
    time: float | None = None


def parse_headers(block: bytes) -> dict[str, str]:
    """A NATS header block (``NATS/1.0`` line, then ``Name: value`` lines) as a dict."""
    headers: dict[str, str] = {}
    for line in block.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            headers[name.decode().strip()] = value.decode().strip()
    return headers


async def write(
    conn: Connection,
    subject: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    expect_last: int | None = None,
    timeout: float = 5.0,
) -> Stored:
    """Store one message; with ``expect_last`` only if the subject's last sequence is that
    (0: the subject is empty), else :class:`SubjectMoved`. Other refusals raise
    :class:`WriteRefused`."""
    sent = dict(headers)
    if expect_last is not None:
        sent["Nats-Expected-Last-Subject-Sequence"] = str(expect_last)
    try:
        answer = await conn.nc.request(subject, body, timeout=timeout, headers=sent)
        return stored_from(parse_reply(answer.data, answer.headers))
    except REQUEST_ERRORS as exc:
        failure = classify(exc)
        if failure.err_code in _WRONG_LAST_SEQUENCE:
            raise SubjectMoved(subject) from exc
        raise WriteRefused(
            f"cannot store on {subject}: {failure.text}", failure.err_code, transient=failure.transient
        ) from exc


async def read_last(conn: Connection, stream: str, subject: str) -> StoredMessage | None:
    """The last message on ``subject`` (a literal subject), None when there is none."""
    return await _get(conn, stream, {"last_by_subj": subject})


async def read_next(conn: Connection, stream: str, subjects: str, from_seq: int = 1) -> StoredMessage | None:
    """The first message at or after ``from_seq`` on a subject matching ``subjects``."""
    return await _get(conn, stream, {"seq": max(1, from_seq), "next_by_subj": subjects})


async def delete(conn: Connection, stream: str, seq: int) -> bool:
    """Delete message ``seq``; False when it is not there (any more)."""
    try:
        body = await request_json(conn, api_subject("STREAM.MSG.DELETE", stream), {"seq": seq})
    except REQUEST_ERRORS as exc:
        failure = classify(exc)
        if failure.code in (400, 404) and not failure.transient:
            return False  # "no message found" is a 400 on some servers, a 404 on others
        raise topology_error(f"cannot delete message {seq} of {stream}", exc) from exc
    return bool(body.get("success"))


async def _get(conn: Connection, stream: str, request: dict[str, Any]) -> StoredMessage | None:
    try:
        body = await request_json(conn, api_subject("STREAM.MSG.GET", stream), request)
    except REQUEST_ERRORS as exc:
        if classify(exc).not_found:
            return None
        raise topology_error(f"cannot read {stream}", exc) from exc
    raw = body.get("message") or {}
    headers = parse_headers(base64.b64decode(raw["hdrs"])) if raw.get("hdrs") else {}
    stamp = raw.get("time")
    when = None
    if isinstance(stamp, str):
        try:
            when = datetime.fromisoformat(stamp).timestamp()
        except ValueError:
            when = None
    return StoredMessage(
        subject=str(raw.get("subject") or ""),
        seq=int(raw.get("seq") or 0),
        headers=headers,
        body=base64.b64decode(raw.get("data") or b""),
        time=when,
    )
