"""A connection attempt whose caller is cancelled (a dashboard closing while its live feed
connects) ends with it: no client is left connecting, or connected, with nobody to close it."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from jsworker.jetstream.connection import Connection, ConnectOptions
from jsworker.testing import NatsServer

from ..support import connections, freeze, wait_until_async

pytestmark = pytest.mark.anyio


async def test_a_cancelled_connect_leaves_nothing_running() -> None:
    # A server that takes the connection and never says a word: the attempt waits.
    accepted: list[asyncio.StreamWriter] = []
    gone: list[asyncio.StreamWriter] = []
    server_side: set[asyncio.Task[object] | None] = set()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server_side.add(asyncio.current_task())
        accepted.append(writer)
        await reader.read()  # until the client goes away
        gone.append(writer)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    before = asyncio.all_tasks()
    try:
        options = ConnectOptions(servers=[f"nats://127.0.0.1:{port}"], connect_timeout=30, attempt_timeout=30)
        opening = asyncio.create_task(Connection.open(options))
        await wait_until_async(lambda: bool(accepted), timeout=10, message="the attempt to reach the server")
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
        left = [t for t in asyncio.all_tasks() - before - server_side if not t.done()]
        assert left == [], left
        # ... and its socket was closed: the server reads the end of it.
        await wait_until_async(lambda: len(gone) == len(accepted), timeout=10, message="the socket closed")
    finally:
        server.close()
        for writer in accepted:
            writer.close()


async def test_a_close_cut_short_leaves_no_socket_and_no_client(nats_server: NatsServer) -> None:
    # A caller's deadline (or its own cancellation) can end a close while it drains: the
    # socket must not stay open, nor the client reconnect on its own.
    options = ConnectOptions(servers=[nats_server.url], name="close-cut-short")
    conn = await Connection.open(options)

    def listed() -> bool:
        return any(c.get("name") == "close-cut-short" for c in connections(nats_server.monitoring_url))

    assert await asyncio.to_thread(listed)
    # The server, stopped where it is, answers nothing: the drain waits on it until cut short.
    pid = nats_server.pid
    assert pid is not None
    freeze(pid)
    try:
        closing = asyncio.create_task(conn.close())
        await wait_until_async(lambda: conn.nc.is_draining, timeout=10, message="the drain to begin")
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
    finally:
        os.kill(pid, signal.SIGCONT)
    await wait_until_async(lambda: conn.is_closed, timeout=10, message="the client to end")
    assert not await asyncio.to_thread(listed)
