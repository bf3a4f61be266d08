"""docs/getting-started.md, followed as a newcomer would: its commands, read from the page, on a
fresh virtualenv in an empty directory, reach a finished job and a dashboard that answers.

The package is installed from this checkout rather than from PyPI (``jsworker`` in a pip
command becomes the checkout's path), and the server listens on a free port (``jsworker dev``
gets ``--port``, every other command ``JSWORKER_URL``); everything else is the page's own."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..support import free_port, wait_until

ROOT = Path(__file__).parents[2]
PAGE = ROOT / "docs" / "getting-started.md"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"^```{kind}\n(.*?)^```", PAGE.read_text(encoding="utf-8"), re.M | re.S)


def _commands() -> list[tuple[str, list[str]]]:
    """Each ``$ command`` of the page's console blocks, with the lines it prints there."""
    found: list[tuple[str, list[str]]] = []
    for block in _blocks("console"):
        for line in block.splitlines():
            if line.startswith("$ "):
                found.append((line[2:].split("  #")[0].strip(), []))
            elif line.strip():
                found[-1][1].append(line)
    return found


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    """The processes a test starts; each still running at the end is stopped by its pid."""
    procs: list[subprocess.Popen[str]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)


@pytest.mark.timeout(600)
def test_the_getting_started_page_ends_with_a_finished_job(
    tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    commands = _commands()
    assert [c for c, _ in commands] == [
        "python3 -m venv .venv && . .venv/bin/activate",
        "pip install 'jsworker[server]'",
        "jsworker dev",
        "jsworker run tasks",
        'python -c "from tasks import add; print(add.delay(2, 3).result(timeout=10))"',
        "pip install 'jsworker[ui]'",
        "jsworker ui tasks",
    ], "the page's commands changed: walk the new ones here"
    (tasks,) = _blocks("python")
    (tmp_path / "tasks.py").write_text(tasks, encoding="utf-8")
    bin_dir = tmp_path / ".venv" / "bin"
    port, ui_port = free_port(), free_port()
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "VIRTUAL_ENV": str(tmp_path / ".venv"),
        "JSWORKER_URL": f"nats://127.0.0.1:{port}",
    }
    env.pop("PYTHONPATH", None)  # nothing of this checkout but what pip installs

    def run(command: str) -> str:
        done = subprocess.run(
            command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def start(args: list[str]) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            args, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        started.append(proc)
        return proc

    # 1. The virtualenv (activation is the PATH above), and the package from this checkout.
    run(f"{shlex.quote(sys.executable)} -m venv .venv")
    for command, _ in commands:
        if command.startswith("pip install"):
            extra = re.search(r"jsworker(\[\w+\])", command)
            assert extra is not None, command
            run(f"pip install -q {shlex.quote(str(ROOT) + extra.group(1))}")
            break
    # 2.-4. A server, a worker.
    server = start([str(bin_dir / "jsworker"), "dev", "--port", str(port)])
    wait_until(lambda: _listening(port) or server.poll() is not None, timeout=60, message="the server")
    assert server.poll() is None, "jsworker dev stopped"
    worker = start([str(bin_dir / "jsworker"), "run", "tasks"])
    # 5. A job, and what the page says it prints.
    command, printed = commands[4]
    assert run(command).splitlines() == printed
    assert worker.poll() is None
    # 6. The dashboard.
    run(f"pip install -q {shlex.quote(str(ROOT) + '[ui]')}")
    start([str(bin_dir / "jsworker"), "ui", "tasks", "--port", str(ui_port)])
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def answers() -> bool:
        try:
            with opener.open(f"http://127.0.0.1:{ui_port}/", timeout=5) as page:
                return page.status == 200 and b"hello" in page.read()
        except OSError:
            return False

    wait_until(answers, timeout=60, interval=0.5, message="the dashboard to answer")
