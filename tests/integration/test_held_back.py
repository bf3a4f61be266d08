"""Jobs a limit holds back do not hold the worker: with a task's rate limit or a partition's
concurrency offered far more than it allows, a worker keeps a few of those jobs in its slots
and gives the others back to the server, so its other queue drains as if they were not there,
while the limit still starts its jobs at its pace (and never faster)."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jsworker import App
from jsworker._limits.spec import parse_rate
from jsworker.testing import Execution, NatsServer, parse_execution

from ..support import most_in_any_second, stream_messages, wait_until
from .workers import APPS, start_worker, stop

sys.path.insert(0, str(APPS))
import held_app


@pytest.fixture
def app(nats_server: NatsServer) -> Iterator[App]:
    held_app.app.configure_connection([nats_server.url])
    yield held_app.app
    held_app.app.close()


def runs(record: Path, task: str, event: str = "start") -> list[Execution]:
    """The recorded ``event`` lines of ``task``, in the order they were written."""
    lines = record.read_text().splitlines() if record.exists() else []
    found = (parse_execution(line) for line in lines)
    return [r for r in found if r is not None and r.task == task and r.event == event]


def quick_ones_beside(url: str, record: Path, limited: str, then: Callable[[], object]) -> int:
    """With ``limited``'s jobs enqueued: one worker at -c 10 takes them, then 1,000 quick jobs
    of another queue come; once those all ran, ``then()`` is waited for. Returns how many of
    ``limited``'s jobs had started when the last quick one ran."""
    worker = start_worker(url, record, record.with_suffix(".log"), "-c", "10", module="held_app")
    try:
        wait_until(lambda: runs(record, limited), timeout=30, message="the limited task's first start")
        held_app.quick.delay_many([(i,) for i in range(1000)])
        wait_until(
            lambda: len(runs(record, "quick", "done")),
            until=lambda done: done == 1000,
            timeout=60,
            message="the quick queue drained",
        )
        started_meanwhile = len(runs(record, limited))
        wait_until(then, timeout=90, message="the limited jobs' part")
    finally:
        assert stop(worker) == 0
    return started_meanwhile


@pytest.mark.slow
def test_a_rate_limited_task_offered_more_leaves_the_other_queue_its_slots(
    app: App, nats_server: NatsServer, tmp_path: Path
) -> None:
    """200 jobs of a task limited to 5/s wait, then 1,000 quick jobs of another queue come;
    one worker at -c 10. The quick queue drains while fewer than 100 limited jobs have
    started (20 s of the limit; when each waited in a slot, 10 of them held every slot). The
    limited task then starts at its pace: 5/s within 10 %, never more than its count plus its
    burst in any second; every limited job runs once."""
    record = tmp_path / "record"
    rate = parse_rate(held_app.RATE)
    limited = held_app.rated.delay_many([(i,) for i in range(200)])
    started_meanwhile = quick_ones_beside(
        nats_server.url, record, "rated", lambda: len(runs(record, "rated")) >= 60
    )
    assert started_meanwhile < 100, started_meanwhile
    # Given back again and again, spending no attempt: none taken for one that kills workers.
    assert stream_messages(nats_server.url, app.namespace.dlq_stream) == 0
    times = [r.at for r in runs(record, "rated")]
    assert most_in_any_second(times) <= rate.count + 2 * rate.burst, times
    # The pace from the 10th start to the last: each job waited for its turn, kept in a slot
    # or given back, and the limit's windows still found one ready.
    paced = sorted(times)[9:]
    pace = (len(paced) - 1) / (paced[-1] - paced[0])
    per_second = rate.count / rate.period
    assert 0.9 * per_second <= pace <= 1.1 * per_second, pace
    ids = [r.job_id for r in runs(record, "rated")]
    assert len(ids) == len(set(ids)) and set(ids) <= {job.id for job in limited}


@pytest.mark.slow
def test_a_busy_partition_leaves_the_other_queue_its_slots(
    app: App, nats_server: NatsServer, tmp_path: Path
) -> None:
    """100 jobs of one account (one running at a time, 50 ms each), then 1,000 quick jobs of
    another queue; one worker at -c 10. The quick queue drains while fewer than 50 of the
    account's jobs have started, no two of them ever overlap, and all 100 run once."""
    record = tmp_path / "record"
    held_app.parted.delay_many([("acct", i) for i in range(100)])

    def all_done_and_acknowledged() -> bool:
        done = len(runs(record, "parted", "done")) == 100
        return done and stream_messages(nats_server.url, app.namespace.stream) == 0

    started_meanwhile = quick_ones_beside(nats_server.url, record, "parted", all_done_and_acknowledged)
    assert started_meanwhile < 50, started_meanwhile
    assert stream_messages(nats_server.url, app.namespace.dlq_stream) == 0
    begun = {(r.job_id, r.attempt): r.at for r in runs(record, "parted")}
    spans = sorted((begun[r.job_id, r.attempt], r.at) for r in runs(record, "parted", "done"))
    assert not [(a, b) for a, b in itertools.pairwise(spans) if b[0] < a[1]]
    assert len(spans) == len({r.job_id for r in runs(record, "parted", "done")}) == 100
