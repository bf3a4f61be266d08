"""A sync task past its timeout in a real ``jsworker run``: its next attempt starts only after
the first attempt's thread has returned."""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from jsworker import App
from jsworker.testing import Execution, parse_execution

from ..support import wait_until
from .workers import running_worker

if TYPE_CHECKING:
    from jsworker.testing import NatsServer

ACK_WAIT = 1.5  # the overrun queue's, from tests/integration/apps/acceptance_app.py


@pytest.mark.slow
def test_attempts_of_a_timed_out_sync_job_never_overlap(nats_server: NatsServer, tmp_path: Path) -> None:
    """timeout=0.3 s, ack_wait 1.5 s, 2 attempts, each held past both (until the worker has
    reported the overrun and the attempt has outlasted the server's ack_wait): start, done,
    start, done, in that order (not start, start), and the server never redelivered it while
    it ran."""
    record, log, gates = tmp_path / "record", tmp_path / "worker.log", tmp_path / "gates"
    gates.mkdir()
    for attempt in (1, 2):
        os.mkfifo(gates / str(attempt))
    app = App("acc", nats_server.url)

    @app.task(name="overrun_sync", queue="overrun")
    def overrun_sync(gates: str) -> None: ...

    def runs() -> list[Execution]:
        if not record.exists():
            return []
        parsed = [parse_execution(line) for line in record.read_text().splitlines()]
        return [rec for rec in parsed if rec is not None]

    def outlasted_ack_wait(attempt: int) -> bool:
        """The attempt's thread is past its timeout (the worker said so) and has run longer
        than the ack_wait after which the server would redeliver a job nobody keeps alive."""
        started = [r for r in runs() if r.event == "start" and r.attempt == attempt]
        overruns = log.read_text().count("job.sync_overrun ") if log.exists() else 0
        return bool(started) and overruns >= attempt and time.monotonic() - started[0].at > ACK_WAIT

    try:
        with running_worker(nats_server.url, record, log, "--queues", "overrun", "--log-level", "info"):
            overrun_sync.delay(str(gates))
            for attempt in (1, 2):
                overran = functools.partial(outlasted_ack_wait, attempt)
                wait_until(overran, timeout=30, message=f"attempt {attempt} to overrun")
                os.close(os.open(gates / str(attempt), os.O_WRONLY))  # the reader is waiting: no block
            wait_until(runs, until=lambda seen: len(seen) >= 4, timeout=30, message="two whole attempts")
            assert [r.event for r in runs()] == ["start", "done", "start", "done"]
        assert log.read_text().count("job.sync_overrun_ended") == 2
    finally:
        app.close()
