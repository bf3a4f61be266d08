"""Atomic batch publish (nats-server 2.12+, streams with ``allow_atomic``): every message of
a batch is stored, or none is. Workflows are built on it: a group's members with their
definition, a workflow's next step with the state write that records it."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Awaitable, Sequence

from nats.aio.msg import Msg

from .._errors import WriteRefused
from .api import REQUEST_ERRORS, classify, parse_reply
from .connection import Connection
from .message import OutMessage, Stored, check_size, headers_of, stored_from

#: The most messages the server takes in one batch (its default ``max_batch``).
MAX_BATCH = 1000
#: Servers with atomic batch publish.
ATOMIC_SINCE = (2, 12, 0)
# A batch refused because one of its writes was already made: a subject's expected last
# sequence moved (10071, 10164), or a message id already stored (10201).
_ALREADY = (10071, 10164, 10201)
# The server holds too many batches of the stream open at once (each waits for its commit).
_TOO_MANY_INFLIGHT = 10210


class BatchConflict(Exception):
    """An atomic batch was refused as a whole because a message of it met a write made
    before (an expected last sequence moved, or a message id is stored already)."""


async def publish_atomic(
    conn: Connection, msgs: Sequence[OutMessage], timeout: float = 5.0, patience: float = 15.0
) -> Stored:
    """Store ``msgs`` all or none; the receipt of the last. :class:`BatchConflict` when an
    expectation or a message id of the batch met an earlier write (nothing is stored), else
    :class:`~jsworker._errors.WriteRefused` for any other refusal. A server busy with other
    batches refuses the whole batch; it is sent again for up to ``patience`` seconds."""
    if not msgs or len(msgs) > MAX_BATCH:
        raise ValueError(f"an atomic batch holds 1 to {MAX_BATCH} messages, not {len(msgs)}")
    for msg in msgs:
        check_size(msg, conn.max_payload)
    deadline = time.monotonic() + patience
    pause = 0.005
    while True:
        try:
            return await _send(conn, msgs, timeout)
        except WriteRefused as exc:
            if exc.err_code != _TOO_MANY_INFLIGHT or time.monotonic() + pause > deadline:
                raise
        # Spread out: the batches that were refused together must not come back together.
        await asyncio.sleep(pause * (0.5 + random.random()))
        pause = min(0.5, pause * 2)


async def _send(conn: Connection, msgs: Sequence[OutMessage], timeout: float) -> Stored:
    batch = uuid.uuid4().hex
    last = len(msgs)

    def sent(i: int, msg: OutMessage) -> Awaitable[Msg]:
        headers = {**headers_of(msg), "Nats-Batch-Id": batch, "Nats-Batch-Sequence": str(i)}
        if i == last:
            headers["Nats-Batch-Commit"] = "1"
        # Every message is a request: the server refuses a batch whose messages have no reply
        # subject, and answers the first ones with empty replies (an error, if one fails).
        return conn.nc.request(msg.subject, msg.body, timeout=timeout, headers=headers)

    # All in flight at once: the server reads one connection's messages in order, and a
    # thousand round trips one after the other would make a large group slow to start.
    answers: list[asyncio.Future[Msg]] = []
    try:
        for i, msg in enumerate(msgs, 1):
            answers.append(asyncio.ensure_future(sent(i, msg)))
        for answer in answers:
            got = await answer
            if got.data or answer is answers[-1]:
                reply = parse_reply(got.data, got.headers)
        return stored_from(reply)
    except REQUEST_ERRORS as exc:
        for answer in answers:
            answer.cancel()
        # Each one awaited: another that failed as well (no responders answer them all at once)
        # must not leave its error unretrieved.
        await asyncio.gather(*answers, return_exceptions=True)
        failure = classify(exc)
        if failure.err_code in _ALREADY:
            raise BatchConflict(failure.text) from exc
        raise WriteRefused(
            f"cannot store a batch of {last} on {msgs[0].subject}: {failure.text}",
            failure.err_code,
            transient=failure.transient,
        ) from exc
