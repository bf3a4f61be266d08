"""Writing a message only where the writer last saw its subject: what schedules and claims
are built on (one message a subject, created or replaced by compare-and-set; reads and deletes
are :class:`~jsworker.jetstream.limits_stream.LimitsStream`'s)."""

from __future__ import annotations

from collections.abc import Mapping

from .._errors import WriteRefused as WriteRefused
from .._wire.headers import EXPECTED_LAST_SUBJECT_SEQ
from .api import REQUEST_ERRORS, classify, parse_reply
from .connection import Connection
from .message import Stored, stored_from

#: The server's codes for a write whose expected last sequence on its subject moved.
WRONG_LAST_SEQUENCE = (10071, 10164)


class SubjectMoved(Exception):
    """A write expecting a subject's last sequence found another one: somebody wrote first."""


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
        sent[EXPECTED_LAST_SUBJECT_SEQ] = str(expect_last)
    try:
        answer = await conn.nc.request(subject, body, timeout=timeout, headers=sent)
        return stored_from(parse_reply(answer.data, answer.headers))
    except REQUEST_ERRORS as exc:
        failure = classify(exc)
        if failure.err_code in WRONG_LAST_SEQUENCE:
            raise SubjectMoved(subject) from exc
        raise WriteRefused(
            f"cannot store on {subject}: {failure.text}", failure.err_code, transient=failure.transient
        ) from exc
