"""Local nats-server processes (``jsworker._server``) against the real binary."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.to_thread
import nats
import pytest
from nats.aio.client import Client
from nats.js.api import StreamInfo

import jsworker._server.loopback
import jsworker._server.process
from jsworker._server import NatsCluster, NatsServer, PortInUseError, ServerStartError

from ..support import UNSETTLED, wait_until_async


@asynccontextmanager
async def connected(*urls: str) -> AsyncIterator[Client]:
    """A client that keeps reconnecting quickly, so it rides over server restarts."""
    nc = await nats.connect(
        servers=list(urls),
        connect_timeout=2,
        reconnect_time_wait=0.1,
        max_reconnect_attempts=-1,
        allow_reconnect=True,
    )
    try:
        yield nc
    finally:
        await nc.close()


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port held by a listening socket of this test."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.anyio
async def test_start_jetstream_and_stop() -> None:
    """A started server takes nats-py connections with JetStream; stop removes its temp store."""
    server = NatsServer()
    await anyio.to_thread.run_sync(server.start)
    try:
        assert server.running
        assert server.pid is not None
        assert server.url == f"nats://127.0.0.1:{server.port}"
        assert server.monitoring_url.startswith("http://127.0.0.1:")
        async with connected(server.url) as nc:
            info = await nc.jetstream().account_info()
            assert info.streams == 0
        store = server.store_dir
        assert (store / "jetstream").is_dir()
    finally:
        await anyio.to_thread.run_sync(server.stop)
    assert not server.running
    assert server.pid is None
    assert not store.exists()
    server.stop()  # idempotent


def test_given_store_dir_is_kept(tmp_path: Path) -> None:
    """A store directory passed in survives stop(), so a later server can reuse it."""
    store = tmp_path / "store"
    with NatsServer(store_dir=store, log_file=tmp_path / "server.log") as server:
        assert server.running
    assert not server.running
    assert (store / "jetstream").is_dir()
    assert "Server is ready" in (tmp_path / "server.log").read_text()


@pytest.mark.anyio
async def test_restart_keeps_port_and_stream(nats_server: NatsServer) -> None:
    """After a kill or a graceful restart: same URL, same stored stream, clients reconnect."""
    port = nats_server.port
    async with connected(nats_server.url) as nc:
        js = nc.jetstream()
        await js.add_stream(name="KEEP", subjects=["keep.>"])
        await js.publish("keep.a", b"1")

        await anyio.to_thread.run_sync(nats_server.kill)
        assert not nats_server.running
        await anyio.to_thread.run_sync(nats_server.restart)
        assert nats_server.running
        assert nats_server.port == port

        # The same client, still holding the old URL, gets back to the restarted server.
        await wait_until_async(
            lambda: js.publish("keep.b", b"2", timeout=1),
            timeout=10,
            message="a publish after the restart",
            ignore=UNSETTLED,
        )
        await anyio.to_thread.run_sync(nats_server.restart)
        assert nats_server.port == port
        info = await wait_until_async(
            lambda: js.stream_info("KEEP"),
            timeout=10,
            message="the stream after the restart",
            ignore=UNSETTLED,
        )
        assert info.state.messages == 2


def test_fixed_port_in_use(held_port: int) -> None:
    """A fixed port already bound by someone else is a PortInUseError, no process left behind."""
    server = NatsServer(port=held_port)
    with pytest.raises(PortInUseError, match=str(held_port)):
        server.start()
    assert not server.running
    server.stop()


def test_port_taken_after_the_check_is_read_from_the_log(
    held_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the port is lost between the check and the bind, the server's log tells."""
    monkeypatch.setattr(jsworker._server.process, "port_is_free", lambda port: True)
    server = NatsServer(port=held_port)
    with pytest.raises(PortInUseError, match="address already in use") as info:
        server.start()
    assert info.value.port == held_port
    assert not server.running
    server.stop()


def test_a_server_listens_below_the_ports_outgoing_connections_get() -> None:
    """Killed and restarted, a server must find its port free: one of its own choosing is
    below the range the OS gives outgoing connections, which could take it in between."""
    ranges = Path("/proc/sys/net/ipv4/ip_local_port_range")
    if not ranges.exists():
        pytest.skip("the OS does not say which ports outgoing connections get (Linux does)")
    low = int(ranges.read_text().split()[0])
    server = NatsServer().start()
    try:
        assert server.port < low, (server.port, low)
    finally:
        server.stop()


def test_a_port_another_process_took_first_is_replaced(
    held_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes may choose the same free port: the one that loses it starts on another."""
    chosen = iter([held_port])
    real = jsworker._server.loopback.pick_port
    monkeypatch.setattr(jsworker._server.process, "pick_port", lambda: next(chosen, None) or real())
    server = NatsServer().start()
    try:
        assert server.port not in (held_port, None)
    finally:
        server.stop()


def test_a_picked_port_is_never_picked_again_while_its_picker_lives() -> None:
    """500 picks in one process are all different: a port stays its picker's (a server it
    killed may start on it again). Picked at random from some 22,000 ports, 500 picks would
    repeat one almost surely without the claims."""
    picked = [jsworker._server.loopback.pick_port() for _ in range(500)]
    assert len(set(picked)) == len(picked)


def test_another_process_claim_holds_while_it_lives_and_not_after() -> None:
    """A port another live process picked is not picked here; once that process is gone
    (killed: its claim file stays) the port may be claimed again; one that exits gives its
    ports back."""
    script = (
        "import sys; from jsworker._server.loopback import pick_port; "
        "print(pick_port(), flush=True); sys.stdin.readline()"
    )

    def picker() -> tuple[subprocess.Popen[str], int]:
        proc = subprocess.Popen(
            [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        return proc, int(proc.stdout.readline())

    loopback = jsworker._server.loopback
    killed, port = picker()
    try:
        assert not loopback._claim(port)
    finally:
        killed.kill()
        killed.communicate()
    assert (loopback._CLAIMS / str(port)).exists()
    assert loopback._claim(port)  # its picker is gone
    exiting, other = picker()
    exiting.communicate("\n", timeout=30)
    assert not (loopback._CLAIMS / str(other)).exists()


def test_failed_start_shows_the_log_tail() -> None:
    """A server that exits while starting: the error carries what it said."""
    server = NatsServer(extra_args=["--no-such-flag"])
    with pytest.raises(ServerStartError, match="no-such-flag"):
        server.start(timeout=10)
    assert not server.running
    server.stop()


@pytest.mark.anyio
@pytest.mark.timeout(40)
@pytest.mark.slow
async def test_cluster_r3_stream_survives_node_restart(nats_cluster: NatsCluster) -> None:
    """Three nodes take an R3 stream; a killed node restarts and catches up with the others."""
    started = time.monotonic()
    assert len(nats_cluster.nodes) == 3
    assert len(set(nats_cluster.urls)) == 3
    async with connected(*nats_cluster.urls) as nc:
        js = nc.jetstream()
        # At once: a started cluster places three replicas (its meta leader counts both other
        # nodes as current, online peers), with no retry for "peer offline".
        info = await js.add_stream(name="R3", subjects=["r3.>"], num_replicas=3)
        assert info.config.num_replicas == 3
        # The new stream's own leader is elected just after it is created.
        await wait_until_async(
            lambda: js.publish("r3.a", b"1", timeout=1),
            timeout=10,
            message="a stream leader",
            ignore=UNSETTLED,
        )

        victim = nats_cluster.node(0)
        await anyio.to_thread.run_sync(victim.kill)
        # Two of three nodes are a quorum: the stream keeps taking messages.
        await wait_until_async(
            lambda: js.publish("r3.b", b"2", timeout=1),
            timeout=15,
            message="a publish with one node down",
            ignore=UNSETTLED,
        )
        await anyio.to_thread.run_sync(victim.restart)
        assert victim.running

        def all_replicas_current(info: StreamInfo) -> bool:
            replicas = (info.cluster.replicas if info.cluster else None) or []
            return (
                info.state.messages == 2
                and info.cluster is not None
                and bool(info.cluster.leader)
                and len(replicas) == 2
                and all(r.current and not r.offline for r in replicas)
            )

        await wait_until_async(
            lambda: js.stream_info("R3"),
            until=all_replicas_current,
            timeout=15,
            message="both other replicas to be current",
            ignore=UNSETTLED,
        )

    # The restarted node serves the stream to its own clients as well.
    async with connected(victim.url) as nc:
        info = await wait_until_async(
            lambda: nc.jetstream().stream_info("R3"),
            timeout=10,
            message="the stream on the restarted node",
            ignore=UNSETTLED,
        )
        assert info.state.messages == 2
    assert time.monotonic() - started < 20


async def _reserve_past_the_free_disk(url: str, store: Path, replicas: int) -> None:
    """Streams whose byte limits add up to more than the store's disk has free: the test
    fixtures' servers take them all, so which apps fit never depends on the machine."""
    gib = 1 << 30
    streams = shutil.disk_usage(store).free // gib + 2
    async with connected(url) as nc:
        js = nc.jetstream()
        for i in range(streams):
            await js.add_stream(
                name=f"LIMITED{i}", subjects=[f"limited.{i}"], max_bytes=gib, num_replicas=replicas
            )
        assert len(await js.streams_info()) == streams


@pytest.mark.anyio
async def test_the_server_fixture_reserves_stream_limits_past_the_free_disk(nats_server: NatsServer) -> None:
    await _reserve_past_the_free_disk(nats_server.url, nats_server.store_dir, replicas=1)


@pytest.mark.anyio
async def test_the_cluster_fixture_reserves_stream_limits_past_the_free_disk(
    nats_cluster: NatsCluster,
) -> None:
    await _reserve_past_the_free_disk(nats_cluster.urls[0], nats_cluster.base_dir, replicas=3)
