"""A fleet under faults: one process of three killed with SIGKILL under load, and a process
that leaks memory until it is recycled."""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from jsworker.testing import NatsServer

from ..integration.workers import APPS, counts, open_gate, records, start_worker, stop
from ..support import wait_consumer_settled, wait_until

sys.path.insert(0, str(APPS))
import fleet_app

pytestmark = pytest.mark.faults


@pytest.fixture
def app(nats_server: NatsServer) -> Iterator[object]:
    fleet_app.app.configure_connection([nats_server.url])
    yield fleet_app.app
    fleet_app.app.close()


def _resident_mb(pid: int) -> float:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _said_since_start(log: Path, pid: int) -> str:
    """What the log says from the start of process ``pid`` on (one process at a time here)."""
    said = log.read_text(errors="replace")
    start = re.search(rf"fleet\.process_started\s+pid={pid}\b", said)
    return said[start.start() :] if start else ""


def _running(record: Path, n: int) -> bool:
    return len(records(record, "start")) >= n


def _retiring(log: Path, pid: int) -> bool:
    return "worker.retiring" in _said_since_start(log, pid)


def _release(gate: Path, record: Path, n: int) -> bool:
    """Open the gate (again, until the run has read it); True once ``n`` jobs are done."""
    open_gate(gate)
    return len(records(record)) >= n


def _started(log: Path) -> list[int]:
    return [
        int(p) for p in re.findall(r"fleet\.process_started\s+pid=(\d+)", log.read_text(errors="replace"))
    ]


@pytest.mark.timeout(120)
def test_a_killed_process_is_replaced_and_no_job_is_lost(
    nats_server: NatsServer, app: object, tmp_path: Path
) -> None:
    record, log = tmp_path / "record", tmp_path / "fleet.log"
    jobs = 3000
    fleet_app.ok.delay_many([(i,) for i in range(jobs)])
    proc = start_worker(
        nats_server.url, record, log, "--processes", "3", "-c", "20", "-Q", "default", "--log-level", "info",
        module="fleet_app",
    )  # fmt: skip
    try:
        wait_until(lambda: len(records(record)) >= 200, timeout=60, message="200 jobs done")
        victim = records(record)[-1][2]  # a process that is running jobs right now
        assert victim in _started(log)
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: len(_started(log)) >= 4, timeout=30, message="the killed process replaced")
        # Its jobs come back after ack_wait (2 s) and run elsewhere: every job completes.
        wait_consumer_settled(nats_server.url, "JSW_FLEET", "default", timeout=90)
        done = counts(record)
        assert len(done) == jobs, f"{jobs - len(done)} jobs never finished"
        assert proc.poll() is None  # the supervisor lived through it
    finally:
        assert stop(proc, timeout=40) == 0


@pytest.mark.timeout(120)
def test_a_leaking_process_is_recycled_and_the_fleet_goes_on(
    nats_server: NatsServer, app: object, tmp_path: Path
) -> None:
    record, log, gate = tmp_path / "record", tmp_path / "fleet.log", tmp_path / "gate"
    os.mkfifo(gate)
    fleet_app.leak.delay_many([(50, str(gate)) for _ in range(12)])
    proc = start_worker(
        nats_server.url, record, log, "--max-memory-per-process", "200", "-c", "1", "-Q", "leaky",
        "--log-level", "info", module="fleet_app",
    )  # fmt: skip
    try:
        # One job at a time: it has taken its memory and waits at the gate. A process over the
        # limit must have seen it (worker.retiring) before its job may end; any other goes on.
        for n in range(1, 13):
            wait_until(partial(_running, record, n), timeout=60, message=f"job {n} running")
            pid = records(record, "start")[-1][2]
            if _resident_mb(pid) >= 200:
                wait_until(
                    partial(_retiring, log, pid),
                    timeout=10,
                    message=f"process {pid}, over its limit, retiring",
                )
            wait_until(partial(_release, gate, record, n), timeout=30, message=f"job {n} done")
        wait_consumer_settled(nats_server.url, "JSW_FLEET", "leaky")
        assert sum(counts(record).values()) == 12  # none ran twice
        # The last recycle may come after the last job: a retiring process runs the job it
        # had pulled, so two processes can do all twelve.
        wait_until(
            lambda: len(
                re.findall(
                    r"fleet\.process_recycled\s+pid=\d+ process=0 reason=memory",
                    log.read_text(errors="replace"),
                )
            ),
            until=lambda recycled: recycled >= 2,
            timeout=30,
            message="two processes recycled for memory",
        )
        # Jobs ran on after a recycle; the last process started may find none left. The
        # supervisor says a process was recycled before it starts the one replacing it.
        wait_until(lambda: len(_started(log)) >= 3, timeout=30, message="the second recycle's replacement")
        assert len({pid for _, _, pid in records(record)}) >= 2
        assert proc.poll() is None
    finally:
        assert stop(proc, timeout=40) == 0
