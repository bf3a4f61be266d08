"""Creating a stream when the server's answer does not come back in time (a busy cluster's meta
leader): the create is read back and tried again, never reported as a failure that did not
happen."""

from __future__ import annotations

from typing import Any

import nats.errors
import pytest
from nats.js.api import StreamConfig

from jsworker._errors import TopologyError
from jsworker.jetstream.connection import Connection, ConnectOptions
from jsworker.jetstream.topology import Change, StreamSpec, apply_stream
from jsworker.testing import NatsServer

pytestmark = pytest.mark.anyio

SPEC = StreamSpec(name="SLOW", subjects=("slow.>",), work_queue=True)


async def test_a_create_whose_answer_was_lost_is_found_made(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = await Connection.open(ConnectOptions(servers=[nats_server.url]))
    try:
        create = conn.js.add_stream
        sent: list[str] = []

        async def answer_lost(config: StreamConfig, **kwargs: Any) -> Any:
            # The server makes the stream; its answer reaches this client too late.
            sent.append(config.name or "")
            await create(config, **kwargs)
            raise nats.errors.TimeoutError

        monkeypatch.setattr(conn.js, "add_stream", answer_lost)
        assert await apply_stream(conn, SPEC) == (Change.CREATED, None)
        assert sent == ["SLOW"]
        info = await conn.js.stream_info("SLOW")
        assert info.config.subjects == ["slow.>"]
    finally:
        await conn.close()


async def test_creates_that_never_reach_the_server_fail_after_three_tries(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = await Connection.open(ConnectOptions(servers=[nats_server.url]))
    try:
        sent: list[str] = []

        async def lost(config: StreamConfig, **kwargs: Any) -> Any:
            sent.append(config.name or "")
            raise nats.errors.TimeoutError

        monkeypatch.setattr(conn.js, "add_stream", lost)
        with pytest.raises(TopologyError, match=r"cannot create stream SLOW.*timeout"):
            await apply_stream(conn, SPEC)
        assert sent == ["SLOW"] * 3
    finally:
        await conn.close()
