"""``jsworker status`` against a real server: exact counts, ages, --json, --watch, exit codes."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from jsworker._core.queues import format_age
from jsworker.testing import NatsServer

from .. import launcher
from ..support import REFUSED_QUICKLY, wait_until
from .workers import APPS, records, running_worker, worker_env

sys.path.insert(0, str(APPS))
import acceptance_app as acc


@pytest.fixture
def app(nats_server: NatsServer) -> Iterator[Any]:
    """The acceptance app (queues ``default`` and ``slow``), producing to this test's server."""
    acc.app.servers = [nats_server.url]
    yield acc
    acc.app.close()


def _run(
    *args: str, url: str, timeout: float = 30, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return launcher.run(["status", *args], env={**worker_env(url), **(env or {})}, timeout=timeout)


def _status(url: str) -> dict[str, dict[str, Any]]:
    """One ``status --json`` refresh, by queue."""
    result = _run("acceptance_app", "--json", url=url)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    return {row["queue"]: row for row in rows}


def _error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    return lines[0]


async def _publish(url: str, subject: str, body: bytes, msg_id: str) -> None:
    nc = await nats.connect(url)
    try:
        await nc.jetstream().publish(subject, body, headers={"Nats-Msg-Id": msg_id})
    finally:
        await nc.close()


def _provision(app: Any) -> None:
    async def go() -> None:
        try:
            await app.app.provision()
        finally:
            await app.app.aclose()

    asyncio.run(go())


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections: bound by us, never listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def test_format_age() -> None:
    """Ages read the way people say them: two units at most."""
    assert format_age(None) == "-"
    assert format_age(3.7) == "3s"
    assert format_age(125) == "2m5s"
    assert format_age(120) == "2m"
    assert format_age(3720) == "1h2m"
    assert format_age(90000) == "1d1h"


def test_never_provisioned_app_shows_zeros(nats_server: NatsServer) -> None:
    """No stream yet: every queue of the app with zeros, exit 0, nothing on stderr."""
    result = _run("acceptance_app", url=nats_server.url)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    header = ["QUEUE", "PENDING", "IN", "FLIGHT", "REDELIVERED", "DEAD", "WAITING", "OLDEST", "DELAYED"]
    header += ["NEXT", "DUE", "MAX", "RUNNING", "PRIORITY", "WORKERS"]
    assert lines[1].split() == header
    queues = acc.app.queues
    assert {"default", "slow"} <= set(queues)
    rows_shown = [line.split() for line in lines[2:] if line.strip()]
    assert rows_shown == [[queue, "0", "0", "0", "0", "0", "-", "0", "-", "-", "0", "0"] for queue in queues]
    rows = _status(nats_server.url)
    assert set(rows) == set(queues)
    for row in rows.values():
        assert row["pending"] == row["in_flight"] == row["dead_letters"] == row["waiting_pulls"] == 0
        assert row["oldest_pending_age"] is None
        assert row["has_consumer"] is False
        assert row["workers"] == 0


@pytest.mark.slow
def test_pending_is_exact_on_two_queues_and_oldest_age_grows(nats_server: NatsServer, app: Any) -> None:
    """Jobs and no worker: pending is exact per queue, with or without consumers; the age grows."""
    for i in range(5):
        app.record_async.delay(i)
    app.sleep_async.delay(1.0)
    app.sleep_sync.delay(2.0)

    started = time.monotonic()
    first = _status(nats_server.url)
    assert first["default"]["pending"] == 5
    assert first["slow"]["pending"] == 2
    assert first["default"]["has_consumer"] is False
    for queue, row in first.items():
        assert isinstance(row["pending"], int)
        # Only the two queues given jobs have an oldest one.
        assert isinstance(row["oldest_pending_age"], float) is (queue in ("default", "slow")), row
        assert row["in_flight"] == row["redelivered"] == row["dead_letters"] == row["waiting_pulls"] == 0

    _provision(app)  # consumers now exist: the numbers come from them and must not change

    def grown(rows: dict[str, dict[str, Any]], queue: str) -> float:
        return float(rows[queue]["oldest_pending_age"]) - float(first[queue]["oldest_pending_age"])

    # Ages come from the jobs' stored times: they grow with the clock, a second in a second.
    second = wait_until(
        lambda: _status(nats_server.url),
        until=lambda rows: all(grown(rows, queue) >= 1.0 for queue in ("default", "slow")),
        timeout=20,
        interval=0.2,
        message="the oldest jobs to age by a second",
    )
    elapsed = time.monotonic() - started
    assert second["default"]["has_consumer"] is True
    assert (second["default"]["pending"], second["slow"]["pending"]) == (5, 2)
    for queue in ("default", "slow"):
        assert grown(second, queue) <= elapsed + 1.0, (queue, elapsed, first[queue], second[queue])

    table = _run("acceptance_app", url=nats_server.url).stdout.splitlines()
    default = table[2].split()
    assert default[:6] == ["default", "5", "0", "0", "0", "0"]
    assert default[6].endswith("s")  # "1s" .. "9s": the age, human


def test_worker_holding_a_long_job_is_in_flight(nats_server: NatsServer, app: Any, tmp_path: Path) -> None:
    """A worker running one long job: in flight 1, nothing pending, a pull request waiting for more."""
    record = tmp_path / "record.log"
    app.record_async.delay(1)  # on "default", which this worker does not serve
    with running_worker(nats_server.url, record, tmp_path / "w.log", "--queues", "slow", "--grace", "0"):
        app.sleep_async.delay(30.0)
        wait_until(lambda: len(records(record, "start")) == 1, timeout=30, message="the long job to start")

        rows = wait_until(
            lambda: _status(nats_server.url),
            until=lambda rows: rows["slow"]["in_flight"] == 1 and rows["slow"]["waiting_pulls"] >= 1,
            timeout=15,
            interval=0.3,
            message="in flight 1 and a waiting pull on slow",
        )
    slow, default = rows["slow"], rows["default"]
    assert (slow["pending"], slow["in_flight"], slow["redelivered"]) == (0, 1, 0)
    assert slow["oldest_pending_age"] is None  # the only job is running, not pending
    assert slow["has_consumer"] is True
    assert (default["pending"], default["in_flight"], default["waiting_pulls"]) == (1, 0, 0)


def test_dead_letters_are_counted_per_queue(nats_server: NatsServer, app: Any, tmp_path: Path) -> None:
    """Bad jobs a worker dead-letters, and a dead letter of a queue the app no longer has."""
    record = tmp_path / "record.log"
    with running_worker(nats_server.url, record, tmp_path / "w.log"):
        wait_until(
            lambda: _status(nats_server.url)["default"]["has_consumer"],
            timeout=30,
            message="the worker's consumers",
        )
        url = nats_server.url
        asyncio.run(_publish(url, "jsw.acc.q.default.no_such_task", b'{"args": [], "kwargs": {}}', "bad-1"))
        asyncio.run(_publish(url, "jsw.acc.q.default.record_async", b"not json", "bad-2"))
        asyncio.run(_publish(url, "jsw.acc.q.slow.sleep_async", b'{"args": ["x", "y"]}', "bad-3"))
        asyncio.run(_publish(url, "jsw.acc.dlq.retired.old_task", b"{}", "bad-4"))

        rows = wait_until(
            lambda: _status(url),
            # A dead letter is stored before its job is terminated: until the server has the
            # term, the job still counts as in flight.
            until=lambda rows: (
                rows["default"]["dead_letters"] == 2
                and rows["slow"]["dead_letters"] == 1
                and all(row["pending"] == 0 and row["in_flight"] == 0 for row in rows.values())
            ),
            timeout=30,
            interval=0.3,
            message="three dead letters, their jobs ended",
        )
    assert rows["retired"]["dead_letters"] == 1
    assert rows["retired"]["has_consumer"] is False


def test_watch_refreshes_until_sigint_and_exits_0(nats_server: NatsServer, app: Any) -> None:
    """``--watch`` prints refresh after refresh (JSON Lines here) and exits 0 on Ctrl-C."""
    app.record_async.delay(1)
    with subprocess.Popen(
        [sys.executable, "-m", "jsworker", "status", "acceptance_app", "--json", "--watch", "0.3"],
        env=worker_env(nats_server.url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            refreshes: set[float] = set()
            while len(refreshes) < 3:
                line = proc.stdout.readline()
                assert line, "status --watch stopped printing"
                row = json.loads(line)
                assert row["queue"] in acc.app.queues
                refreshes.add(row["time"])
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=15)
            assert proc.returncode == 0, err
            assert "Traceback" not in err
            assert all(json.loads(line)["app"] == "acc" for line in out.splitlines())
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_watch_table_refreshes(nats_server: NatsServer) -> None:
    """The human table under ``--watch``: one header per refresh, exit 0 on SIGINT."""
    with subprocess.Popen(
        [sys.executable, "-m", "jsworker", "status", "acceptance_app", "--watch", "0.2"],
        env=worker_env(nats_server.url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            headers = 0
            while headers < 2:
                line = proc.stdout.readline()
                assert line, "status --watch stopped printing"
                headers += line.startswith("QUEUE")
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=15)
            assert proc.returncode == 0, err
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize("extra", [(), ("--watch", "1")])
def test_unreachable_server_exits_3(closed_port: int, extra: tuple[str, ...]) -> None:
    """No server at the URL: exit 3 and one line naming it, with or without --watch."""
    url = f"nats://127.0.0.1:{closed_port}"
    started = time.monotonic()
    result = _run("acceptance_app", *extra, url=url, env=REFUSED_QUICKLY)
    assert result.returncode == 3, result.stderr
    assert url in _error_line(result.stderr)
    assert time.monotonic() - started < 20


def test_missing_module_exits_2() -> None:
    """A module that does not exist: exit 2 and one line."""
    result = _run("no_such_module_xyz", url="nats://127.0.0.1:1")
    assert result.returncode == 2
    assert "no_such_module_xyz" in _error_line(result.stderr)
