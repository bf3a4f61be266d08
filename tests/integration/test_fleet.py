"""``jsworker run --processes N`` against a real server: one metrics endpoint with exact totals
over live and recycled processes, a clean stop, and an app that cannot start."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jsworker._cli.run import _Processes
from jsworker.testing import NatsServer

from ..support import stream_messages, wait_consumer_settled, wait_until
from .workers import (
    APPS,
    counts,
    open_gate,
    records,
    scrape,
    start_metrics_worker,
    start_worker,
    stop,
    value,
    worker_env,
)

sys.path.insert(0, str(APPS))
import fleet_app


@pytest.fixture
def app(nats_server: NatsServer) -> Iterator[object]:
    fleet_app.app.configure_connection([nats_server.url])
    yield fleet_app.app
    fleet_app.app.close()


def started_pids(log: Path) -> list[int]:
    """The pids of the worker processes the supervisor started, in order."""
    return [
        int(p) for p in re.findall(r"fleet\.process_started\s+pid=(\d+)", log.read_text(errors="replace"))
    ]


def test_processes_flag_takes_a_count_or_auto() -> None:
    convert = _Processes().convert
    assert convert("3", None, None) == 3
    assert convert("auto", None, None) >= 1
    with pytest.raises(Exception, match="at least 1"):
        convert("0", None, None)


@pytest.mark.slow
def test_one_endpoint_sums_every_process_including_recycled_ones(
    nats_server: NatsServer, app: object, tmp_path: Path
) -> None:
    """60 successes and 15 dead letters over 3 processes that recycle every 10 jobs: the
    fleet's totals are exact, though most processes that counted them have exited."""
    record, log = tmp_path / "record", tmp_path / "fleet.log"
    env = worker_env(nats_server.url, record)
    fleet_app.ok.delay_many([(i,) for i in range(60)])
    fleet_app.boom.delay_many([(i,) for i in range(15)])
    proc, port = start_metrics_worker(
        env, log, "fleet_app", "--processes", "3", "--max-jobs-per-process", "10", "-c", "2", "-Q", "default"
    )
    try:
        wait_until(lambda: len(records(record)) >= 75, timeout=60, message="75 jobs run")
        wait_consumer_settled(nats_server.url, "JSW_FLEET", "default")
        d = {"queue": "default"}
        expected = {
            ("jsworker_jobs_succeeded_total", "ok"): 60.0,
            ("jsworker_jobs_started_total", "ok"): 60.0,
            ("jsworker_jobs_started_total", "boom"): 15.0,
            ("jsworker_job_duration_seconds_count", "ok"): 60.0,
        }

        def totals() -> dict[tuple[str, str], float]:
            samples = scrape(port)
            got = {(name, task): value(samples, name, **d, task=task) for name, task in expected}
            got["dead", "boom"] = value(
                samples, "jsworker_jobs_dead_lettered_total", **d, task="boom", outcome="rejected"
            )
            got["recycled", ""] = value(samples, "jsworker_worker_restarts_total", reason="jobs")
            return got

        got = wait_until(
            totals,
            until=lambda t: all(t[k] == v for k, v in expected.items()) and t["dead", "boom"] == 15,
            timeout=30,
            message=f"the fleet's totals to reach {expected}",
        )
        assert got["recycled", ""] >= 4  # 75 jobs at 10 per process: most processes were replaced
        assert len(set(started_pids(log))) >= 7
        assert sum(counts(record).values()) == 75  # recycling ran no job twice
        # 3 live processes of -c 2, once the last one replaced has sent its first figures.
        wait_until(
            lambda: value(scrape(port), "jsworker_concurrency_limit"),
            until=lambda limit: limit == 6,
            timeout=30,
            message="the concurrency of 3 live processes",
        )
    finally:
        assert stop(proc, timeout=40) == 0


def test_sigterm_drains_every_process_and_exits_0(
    nats_server: NatsServer, app: object, tmp_path: Path
) -> None:
    record, log, gate = tmp_path / "record", tmp_path / "fleet.log", tmp_path / "gate"
    os.mkfifo(gate)
    fleet_app.held.delay_many([(str(gate),) for _ in range(9)])
    proc = start_worker(
        nats_server.url, record, log, "--processes", "3", "-c", "1", "--max-messages", "1", "-Q", "held",
        "--log-level", "info", module="fleet_app",
    )  # fmt: skip
    try:
        # Each process is running a job when the signal comes (and, at -c 1, starts no other).
        wait_until(
            lambda: len({pid for _, _, pid in records(record, "start")}) == 3,
            timeout=30,
            message="jobs started in all 3 processes",
        )
        started = {job for job, _, _ in records(record, "start")}
        proc.send_signal(signal.SIGTERM)
        # Every process has the signal (and takes no new job) before the held ones may end.
        wait_until(
            lambda: log.read_text().count("worker.stopping") == 3, timeout=10, message="3 processes stopping"
        )

        def released() -> bool:
            open_gate(gate)  # again until every held run has read it: one may not be waiting yet
            return {job for job, _, _ in records(record)} >= started

        wait_until(released, timeout=30, message="the running jobs to finish")
        assert proc.wait(40) == 0
        done = {job for job, _, _ in records(record)}
        assert started <= done  # every job running at the signal finished within the grace
        # Only the held queue has jobs: what did not run is still there for the next worker.
        assert stream_messages(nats_server.url, "JSW_FLEET") == 9 - len(done) > 0
    finally:
        stop(proc)


def test_an_app_that_cannot_start_ends_the_fleet_with_its_cause(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "jsworker", "run", "no_app", "--processes", "3"],
        env=worker_env(nats_server.url),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 1, out.stderr
    assert "could not start" in out.stderr and "has no jsworker App" in out.stderr
    # Three processes tried once each, then the supervisor gave up: no restart loop.
    assert len(re.findall(r"fleet\.process_started", out.stderr)) == 3
    assert time.monotonic() - started < 30
