"""The command line: exit codes and one clear line on failure."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from jsworker.testing import NatsServer

from .. import launcher
from ..support import REFUSED_QUICKLY, PortTaken, on_a_free_port
from .workers import worker_env


def _run(
    *args: str, url: str = "nats://127.0.0.1:1", timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return launcher.run(args, env={**worker_env(url), **REFUSED_QUICKLY}, timeout=timeout)


def _error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    return lines[0]


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections: bound by us, never listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


def test_missing_module_exits_2() -> None:
    """A module that does not exist: exit 2 and one line naming it."""
    result = _run("run", "no_such_module_xyz")
    assert result.returncode == 2
    assert "no_such_module_xyz" in _error_line(result.stderr)


def test_module_without_app_exits_2() -> None:
    """A module with no App: exit 2 and one line saying so."""
    result = _run("run", "no_app")
    assert result.returncode == 2
    assert "no jsworker App" in _error_line(result.stderr)


def test_unreachable_server_exits_3(closed_port: int) -> None:
    """No server at the URL: exit 3 and one line naming the URL."""
    url = f"nats://127.0.0.1:{closed_port}"
    result = _run("run", "acceptance_app", url=url)
    assert result.returncode == 3, result.stderr
    assert url in _error_line(result.stderr)


def test_bad_option_exits_2() -> None:
    """Usage errors (click's own) also exit 2."""
    result = _run("run", "acceptance_app", "--concurrency", "0")
    assert result.returncode == 2


@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_dev_server_starts_and_stops_on_ctrl_c(inherited: str) -> None:
    """``jsworker dev --port P`` serves JetStream on P and exits 0 on SIGINT, also when it was
    started with SIGINT ignored, as a shell without job control starts a background command
    (Python then raises no KeyboardInterrupt of its own)."""
    started: list[subprocess.Popen[str]] = []
    # `trap '' INT` ignores SIGINT, and exec keeps an ignored signal ignored.
    trap = "trap '' INT; " if inherited == "ignored" else ""

    def start(port: int) -> tuple[subprocess.Popen[str], int, str]:
        proc = subprocess.Popen(
            ["sh", "-c", f'{trap}exec "$0" -m jsworker dev --port {port}', sys.executable],
            env=worker_env(""),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        if not first and proc.wait(30) == 2:
            said = proc.stderr.read()
            if "in use" in said:
                raise PortTaken(said)
        return proc, port, first

    try:
        proc, port, first = on_a_free_port(start)
        assert f"nats://127.0.0.1:{port}" in first
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0  # beyond the 15 s the dev command gives nats-server to stop
    finally:
        for each in started:
            if each.poll() is None:
                each.kill()
                each.wait()
            for pipe in (each.stdout, each.stderr):
                if pipe is not None:
                    pipe.close()


def test_dev_port_taken_is_a_clear_error(nats_server: NatsServer) -> None:
    """``jsworker dev`` on a port in use: exit 2 and one line, not a traceback."""
    started = time.monotonic()
    result = _run("dev", "--port", str(nats_server.port))
    assert result.returncode == 2
    assert "in use" in _error_line(result.stderr)
    assert time.monotonic() - started < 20
