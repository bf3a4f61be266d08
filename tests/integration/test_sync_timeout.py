"""A sync task past its timeout in a real ``jsworker run``: its next attempt starts only after
the first attempt's thread has returned."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from jsworker import App
from jsworker.testing import parse_execution

from ..support import wait_until
from .workers import running_worker

if TYPE_CHECKING:
    from jsworker.testing import NatsServer


def test_attempts_of_a_timed_out_sync_job_never_overlap(nats_server: NatsServer, tmp_path: Path) -> None:
    """timeout=0.3 s, each run 2 s, ack_wait 1.5 s, 2 attempts: start, done, start, done, in
    that order (not start, start), and the server never redelivered it while it ran."""
    record, log = tmp_path / "record", tmp_path / "worker.log"
    app = App("acc", nats_server.url)

    @app.task(name="overrun_sync", queue="overrun")
    def overrun_sync(seconds: float) -> None: ...

    def events() -> list[str]:
        if not record.exists():
            return []
        parsed = [parse_execution(line) for line in record.read_text().splitlines()]
        return [rec.event for rec in parsed if rec is not None]

    try:
        with running_worker(nats_server.url, record, log, "--queues", "overrun", "--log-level", "info"):
            overrun_sync.delay(2.0)
            wait_until(events, until=lambda seen: len(seen) >= 4, timeout=30, message="two whole attempts")
            assert events() == ["start", "done", "start", "done"]
        assert log.read_text().count("job.sync_overrun_ended") == 2
    finally:
        app.close()
