"""Worker logs: JSON lines, one event per finished job, the job's context on the task's own lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from jsworker.testing import NatsServer

from ..support import wait_until
from .workers import APPS, stop, worker_env

sys.path.insert(0, str(APPS))
import logging_app


def test_json_logs_carry_the_job_context(nats_server: NatsServer, tmp_path: Path) -> None:
    """With --log-format json every line parses; the task's own event has the job id, task,
    queue and attempt; the finish event has outcome and duration; the argument is not logged."""
    logging_app.app.servers = [nats_server.url]
    log_file = tmp_path / "worker.log"
    with open(log_file, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jsworker", "run", "logging_app", "--log-format", "json",
             "--log-level", "debug"],
            env=worker_env(nats_server.url),
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        job = logging_app.greet.delay("secret-argument-value")
        wait_until(lambda: "job.succeeded" in log_file.read_text(), timeout=20, message="the job to finish")
    finally:
        stop(proc)
        logging_app.app.close()
    text = log_file.read_text()
    events = [json.loads(line) for line in text.splitlines() if line.strip()]
    own = [e for e in events if e["event"] == "greeted"]
    done = [e for e in events if e["event"] == "job.succeeded"]
    assert len(own) == 1 and len(done) == 1
    for event in (own[0], done[0]):
        assert event["job_id"] == job.id
        assert event["task"] == "greet"
        assert event["queue"] == "default"
        assert event["attempt"] == 1
    assert done[0]["outcome"] == "succeeded"
    assert done[0]["duration"] >= 0
    assert "secret-argument-value" not in text.replace(own[0]["who"], "")
    assert {e["event"] for e in events} >= {"worker.started", "worker.stopped"}
