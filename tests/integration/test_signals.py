"""Stopping ``jsworker run`` with real signals: the first lets running jobs finish within
``--grace``, a second one means now."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

from jsworker import App

from ..support import wait_until
from .workers import records, start_worker, stop

if TYPE_CHECKING:
    from jsworker.testing import NatsServer


def test_a_second_signal_cancels_running_jobs_and_hands_them_back(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """Two 30 s jobs running, --grace 60: SIGINT, then SIGINT again. The worker exits 0
    within seconds, neither job finished, and both are back in the queue for another worker."""
    record, log = tmp_path / "record", tmp_path / "worker.log"
    # The producer's side of acceptance_app's task: same app, queue and task name.
    app = App("acc", nats_server.url)

    @app.task(name="sleep_async", queue="slow")
    async def sleep_async(seconds: float) -> None: ...

    args = ("--queues", "slow", "--grace", "60", "--log-level", "info")
    proc = start_worker(nats_server.url, record, log, *args)
    try:
        for _ in range(2):
            sleep_async.delay(30)
        wait_until(
            lambda: len(records(record, "start")),
            until=lambda started: started == 2,
            timeout=30,
            message="both jobs to start",
        )
        proc.send_signal(signal.SIGINT)
        # The first signal starts the grace period: the worker keeps waiting for its jobs.
        wait_until(lambda: "worker.stopping" in log.read_text(), timeout=10, message="the stop to begin")
        asked = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
        assert time.monotonic() - asked < 10
        assert records(record, "done") == []
        assert log.read_text().count("outcome=cancelled") == 2
        # Handed back, not lost: another worker starts both again.
        again = start_worker(
            nats_server.url, record, tmp_path / "again.log", "--queues", "slow", "--grace", "0"
        )
        try:
            wait_until(
                lambda: len(records(record, "start")),
                until=lambda started: started == 4,
                timeout=30,
                message="both jobs to start on the next worker",
            )
        finally:
            stop(again)
    finally:
        stop(proc)
        app.close()
