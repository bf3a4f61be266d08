"""Rate limits on a real server with worker processes: a queue's limit holds across three
processes (no second starts more than the limit plus its stated burst), a task's too; a bad
spelling fails at declaration."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jsworker import App, ConfigurationError
from jsworker._limits.spec import parse_rate
from jsworker.testing import NatsServer, parse_execution

from ..support import most_in_any_second, wait_until
from .workers import APPS, start_worker, stop

sys.path.insert(0, str(APPS))
import rate_app


@pytest.fixture
def app(nats_server: NatsServer) -> Iterator[App]:
    rate_app.app.configure_connection([nats_server.url])
    yield rate_app.app
    rate_app.app.close()


def starts(record: Path, task: str) -> list[float]:
    """When each run of ``task`` started (the worker's wall clock), in order."""
    lines = record.read_text().splitlines() if record.exists() else []
    found = [parse_execution(line) for line in lines]
    return sorted(float(r.at) for r in found if r is not None and r.task == task and r.event == "wall")


@pytest.mark.parametrize(("task", "rate"), [("emails", "20/s"), ("reports", "10/s")])
@pytest.mark.slow
def test_a_rate_limit_holds_across_three_worker_processes(
    app: App, nats_server: NatsServer, tmp_path: Path, task: str, rate: str
) -> None:
    record, log = tmp_path / "record", tmp_path / "log"
    limit = parse_rate(rate)
    n = 4 * limit.count  # four periods' worth
    app.tasks[task].delay_many([(i,) for i in range(n)])
    procs = [start_worker(nats_server.url, record, log, "-c", "20", module="rate_app") for _ in range(3)]
    try:
        wait_until(lambda: len(starts(record, task)) == n, timeout=60, message=f"{n} {task} jobs to start")
    finally:
        for proc in procs:
            stop(proc)
    times = starts(record, task)
    assert most_in_any_second(times) <= limit.count + 2 * limit.burst, times
    # Held back, not refused: every job ran, once.
    assert len(times) == n


def test_a_bad_rate_fails_at_declaration() -> None:
    app = App("badrate")
    for bad in ("ten per second", "0/s", "5/d", 5):
        with pytest.raises(ConfigurationError, match="rate_limit is 'N/s'"):
            app.queue("q", rate_limit=bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="rate_limit is 'N/s'"):

            @app.task(rate_limit=bad)  # type: ignore[arg-type]
            def noop() -> None: ...


def test_windows_share_the_count_exactly() -> None:
    for text in ("1/s", "7/s", "25/s", "100/m", "3/h"):
        rate = parse_rate(text)
        assert sum(rate.share(i) for i in range(rate.windows)) == rate.count
        assert min(rate.share(i) for i in range(rate.windows)) >= 1
        assert rate.burst == max(rate.share(i) for i in range(rate.windows))
