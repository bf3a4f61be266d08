"""Storing many messages through the acknowledgement pipeline against a real server, on the
client's fast path and on nats-py's own: every message stored once, in order, each with its
own headers, whatever the window; a refusal fails its message alone."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import nats
import pytest

from jsworker._wire.headers import EXPECTED_LAST_SUBJECT_SEQ, MSG_ID
from jsworker.jetstream.connection import Connection, ConnectOptions
from jsworker.jetstream.message import OutMessage, Stored
from jsworker.jetstream.pipeline import AckPipeline, RefusedError, StalledError

from ..support import freeze
from .test_client import fast_path as fast_path

if TYPE_CHECKING:
    from jsworker.testing import NatsServer

pytestmark = pytest.mark.anyio


async def _stream(url: str) -> None:
    nc = await nats.connect(url)
    await nc.jetstream().add_stream(name="PIPE", subjects=["pipe.>"], duplicate_window=60.0)
    await nc.close()


def _msg(
    i: int, *, key: str | None = None, subject: str | None = None, expect_empty: bool = False
) -> OutMessage:
    headers = {MSG_ID: key or f"job-{i}", "Jsw-Task": "t", "Jsw-N": str(i)}
    if expect_empty:
        headers[EXPECTED_LAST_SUBJECT_SEQ] = "0"
    return OutMessage(subject or f"pipe.{i % 7}.{i}", b"[%d]" % i, headers)


@pytest.mark.parametrize("window", [1, 10, 1000])
async def test_every_message_is_stored_once_in_order(
    nats_server: NatsServer, fast_path: bool, window: int
) -> None:
    await _stream(nats_server.url)
    conn = await Connection.open(ConnectOptions(servers=[nats_server.url]))
    heard: list[int] = []

    async def on_stored(msg: OutMessage, stored: Stored) -> None:
        heard.append(int(msg.headers["Jsw-N"]))

    msgs = [_msg(i) for i in range(700)]
    # A second copy of message 3 (its dedup key again), then two messages expecting one empty
    # subject: the first takes it, the second is refused.
    once = "pipe.once"
    msgs += [
        _msg(3),
        _msg(5, key="a", subject=once, expect_empty=True),
        _msg(6, key="b", subject=once, expect_empty=True),
    ]
    try:
        async with AckPipeline(conn, window=window, on_stored=on_stored) as pipe:
            await pipe.publish_all(msgs)
            await pipe.wait()
    finally:
        await conn.close()
    results = [pipe.results[n] for n in range(len(msgs))]
    stored = results[:700]
    assert all(isinstance(r, Stored) and not r.duplicate for r in stored)
    assert [r.seq for r in stored if isinstance(r, Stored)] == list(range(1, 701))
    assert results[700] == Stored(4, True)
    assert isinstance(results[701], Stored) and results[701].seq == 701
    assert isinstance(results[702], RefusedError)
    assert (pipe.created, pipe.duplicates) == (701, 1)
    assert sorted(heard) == sorted([*range(700), 3, 5])  # the duplicate is heard, the refusal is not
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        for seq in (1, 350, 700):
            got = await js.get_msg("PIPE", seq)
            assert got.data == b"[%d]" % (seq - 1)
            assert got.headers is not None and got.headers["Jsw-N"] == str(seq - 1)
    finally:
        await nc.close()


async def test_a_dropped_connection_ends_the_wait_for_what_it_took_unanswered(
    nats_server: NatsServer,
) -> None:
    """Answers to what was outstanding when the connection dropped never come: the wait ends
    then, with StalledError, not after the timeout (an hour here)."""
    await _stream(nats_server.url)
    conn = await Connection.open(ConnectOptions(servers=[nats_server.url]))
    try:
        async with AckPipeline(conn, timeout=3600) as pipe:
            assert nats_server.pid is not None
            freeze(nats_server.pid)  # it answers nothing from here on
            for i in range(5):
                await pipe.publish(_msg(i))
            nats_server.kill()
            with anyio.fail_after(60), pytest.raises(StalledError, match="when the connection was lost"):
                await pipe.wait()
            assert pipe.outstanding == 5
    finally:
        await conn.close()
