"""``jsworker run --reload``: a changed Python file under the app's directory restarts the
worker with the new code, and the job running at that moment is finished, not lost."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jsworker.testing import NatsServer

from ..support import wait_until
from .workers import open_gate, records, stop, worker_env

APP = """
from pathlib import Path

from jsworker import App
from jsworker.testing import record_execution as record

app = App("reloading")
VERSION = "{version}"


@app.task
def which(gate: str) -> None:
    record("start-" + VERSION)
    if gate:
        Path(gate).read_bytes()  # a FIFO: blocks until the test opens it
    record("done-" + VERSION)
"""


def _write(package: Path, version: str) -> None:
    (package / "tasks.py").write_text(APP.format(version=version))


def _release(gate: Path, record: Path) -> bool:
    open_gate(gate)  # again until the run has read it
    return bool(records(record, "done-v1"))


def _ready(log: Path) -> int:
    return len(re.findall(r"fleet\.process_ready", log.read_text(errors="replace")))


@pytest.mark.timeout(120)
def test_a_change_restarts_the_worker_with_the_new_code(nats_server: NatsServer, tmp_path: Path) -> None:
    package = tmp_path / "src" / "reloading"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    _write(package, "v1")
    record, log = tmp_path / "record", tmp_path / "worker.log"
    env = worker_env(nats_server.url, record)
    env["PYTHONPATH"] = f"{tmp_path / 'src'}:{env['PYTHONPATH']}"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jsworker", "run", "reloading.tasks", "--reload", "--log-level", "info"],
            env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
        )  # fmt: skip
    try:
        wait_until(lambda: _ready(log) == 1, timeout=30, message="the worker ready")
        sys.path.insert(0, str(tmp_path / "src"))
        try:
            from reloading import tasks  # type: ignore[import-not-found]  # written by the test
        finally:
            sys.path.remove(str(tmp_path / "src"))
        tasks.app.configure_connection([nats_server.url])
        try:
            gate = tmp_path / "gate"
            os.mkfifo(gate)
            tasks.which.delay(str(gate))
            wait_until(lambda: records(record, "start-v1"), timeout=30, message="the first job running")
            _write(package, "v2")  # while the v1 job runs
            wait_until(
                lambda: "worker.stopping" in log.read_text(), timeout=30, message="the old worker stopping"
            )
            wait_until(lambda: _release(gate, record), timeout=30, message="the running job to finish")
            wait_until(lambda: _ready(log) == 2, timeout=30, message="the worker restarted")
            tasks.which.delay("")
            wait_until(lambda: records(record, "done-v2"), timeout=30, message="a job run by the new code")
        finally:
            tasks.app.close()
        assert len(records(record, "done-v1")) == 1  # the running job finished once, before the restart
        assert len(records(record, "start-v1")) == 1
    finally:
        assert stop(proc, timeout=40) == 0
