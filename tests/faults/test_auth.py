"""A server that requires a user and password: wrong credentials are a clean refusal, right ones work."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jsworker import App
from jsworker.testing import NatsServer

from ..support import wait_until
from .harness import Records, Workers, summarize, wait_stream_empty, worker_env

pytestmark = pytest.mark.faults

USER = "u"
PASSWORD = "p-8f3Kq"


@pytest.fixture
def auth_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A server with JetStream that only lets USER / PASSWORD in."""
    server = NatsServer(extra_args=["--user", USER, "--pass", PASSWORD], log_file=tmp_path / "nats.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.timeout(60)
def test_wrong_credentials_exit_3_right_ones_work(
    auth_server: NatsServer, workers: Workers, records: Records
) -> None:
    """A worker with a wrong password exits with code 3 and one ``error:`` line on stderr (without
    the password in it); the same worker with the right password runs jobs and exits 0 on
    SIGTERM."""
    url = auth_server.url
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "jsworker",
            "run",
            "fault_app",
            "--user",
            USER,
            "--password",
            "wrong-" + PASSWORD,
        ],
        env=worker_env(url, records.path),
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.returncode == 3, refused.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), refused.stderr
    assert PASSWORD not in refused.stdout + refused.stderr

    worker = workers.start(url, "w", "-Q", "default", "--user", USER, "--password", PASSWORD)
    worker.wait_started()
    # A producer of its own: the shared fault app module knows no credentials.
    app = App("flt", url, user=USER, password=PASSWORD, ack_wait=2)

    @app.task
    async def work(n: int, ms: float) -> int:
        return n  # never runs here: the worker runs its own fault_app.work

    try:
        jobs = work.delay_many([(i, 1.0) for i in range(50)])
    finally:
        app.close()
    enqueued = {j.id for j in jobs}
    wait_until(lambda: records.done_ids() >= enqueued, timeout=30, message="the jobs to run")
    # Our own plain connection must authenticate too.
    wait_stream_empty(f"nats://{USER}:{PASSWORD}@127.0.0.1:{auth_server.port}", 10)
    summary = summarize("auth", enqueued, records, [], refused_exit=refused.returncode)
    assert summary["lost"] == 0
    assert worker.terminate() == 0, worker.tail()
