"""The core acceptance: real ``jsworker run`` processes against a real nats-server."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import nats.js.errors
import pytest

from jsworker.testing import NatsServer

from ..support import consumer_state, stream_messages, wait_consumer_settled, wait_until
from .workers import APPS, counts, records, running_worker, start_worker, stop

sys.path.insert(0, str(APPS))
import acceptance_app as acc


@pytest.fixture
def app(nats_server: NatsServer) -> Iterator[Any]:
    """The acceptance app, producing to this test's server."""
    acc.app.servers = [nats_server.url]
    yield acc
    acc.app.close()


@pytest.fixture
def record(tmp_path: Path) -> Path:
    """The file worker processes record executions in."""
    return tmp_path / "record.log"


def test_delay_and_adelay_each_run_exactly_once(
    nats_server: NatsServer, app: Any, record: Path, tmp_path: Path
) -> None:
    """1,000 jobs from .delay and 1,000 from .adelay, async and sync tasks: each runs once."""
    with running_worker(nats_server.url, record, tmp_path / "w.log") as worker:
        sync_jobs = [(app.record_async if i % 2 else app.record_sync).delay(i) for i in range(1000)]

        async def produce() -> list[Any]:
            try:
                return [await (app.record_async if i % 2 else app.record_sync).adelay(i) for i in range(1000)]
            finally:
                await app.app.aclose()

        async_jobs = asyncio.run(produce())
        ids = {j.id for j in sync_jobs + async_jobs}
        assert len(ids) == 2000
        assert not any(j.duplicate for j in sync_jobs + async_jobs)
        wait_until(lambda: len(records(record)) >= 2000, timeout=60, message="2,000 executions")
        # Each run is recorded before its ack: once all are acked, every run is in the record.
        assert wait_consumer_settled(nats_server.url, "JSW_ACC", "default").delivered == 2000
        done = counts(record)
        assert set(done) == ids
        assert max(done.values()) == 1
        assert {task for _, task, _ in records(record)} == {"record_async", "record_sync"}
        assert stream_messages(nats_server.url, "JSW_ACC") == 0
        assert worker.poll() is None


def test_same_job_id_runs_once(nats_server: NatsServer, app: Any, record: Path, tmp_path: Path) -> None:
    """An explicit job id enqueued twice inside the dedup window: one job, second receipt says duplicate."""
    first = app.record_async.apply(args=(1,), job_id="order-42")
    second = app.record_async.apply(args=(1,), job_id="order-42")
    assert not first.duplicate
    assert second.duplicate
    assert second.seq == first.seq
    with running_worker(nats_server.url, record, tmp_path / "w.log"):
        wait_until(lambda: "order-42" in counts(record), timeout=20, message="the job to run")
        third = app.record_async.apply(args=(1,), job_id="order-42")
        assert third.duplicate  # still inside the window, even though the job is done and gone
        assert stream_messages(nats_server.url, "JSW_ACC") == 0
        assert wait_consumer_settled(nats_server.url, "JSW_ACC", "default").delivered == 1
    assert counts(record) == {"order-42": 1}


def test_two_workers_share_a_queue(nats_server: NatsServer, app: Any, record: Path, tmp_path: Path) -> None:
    """Two worker processes on one queue both execute jobs, and no job twice."""
    with (
        running_worker(nats_server.url, record, tmp_path / "w1.log", "--max-messages", "8") as w1,
        running_worker(nats_server.url, record, tmp_path / "w2.log", "--max-messages", "8") as w2,
    ):
        # Both pulling before the jobs arrive: a worker still starting would find none left.
        wait_until(
            lambda: consumer_state(nats_server.url, "JSW_ACC", "default").waiting,
            until=lambda waiting: waiting >= 2,
            timeout=30,
            message="a pull request of each worker",
            ignore=(nats.js.errors.NotFoundError,),
        )
        jobs = app.record_async.delay_many([(i,) for i in range(2000)])
        wait_until(lambda: len(records(record)) >= 2000, timeout=60, message="2,000 executions")
        assert wait_consumer_settled(nats_server.url, "JSW_ACC", "default").delivered == 2000
        done = counts(record)
        assert set(done) == {j.id for j in jobs}
        assert max(done.values()) == 1
        pids = Counter(pid for _, _, pid in records(record))
        assert set(pids) == {w1.pid, w2.pid}, pids


@pytest.mark.slow
def test_long_jobs_are_held_by_heartbeats(
    nats_server: NatsServer, app: Any, record: Path, tmp_path: Path
) -> None:
    """Jobs running 3x the queue's ack_wait (1.5 s) are never redelivered: heartbeats hold them."""
    jobs = [app.sleep_async.delay(4.5), app.sleep_sync.delay(4.5)]
    with running_worker(nats_server.url, record, tmp_path / "w.log"):
        wait_until(lambda: len(records(record)) >= 2, timeout=20, message="both long jobs to finish")
        # Settled, nothing can be redelivered any more; two deliveries means none happened.
        assert wait_consumer_settled(nats_server.url, "JSW_ACC", "slow").delivered == 2
    assert counts(record, "start") == {j.id: 1 for j in jobs}
    assert counts(record) == {j.id: 1 for j in jobs}


async def _dead_letters(url: str) -> list[Any]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        n = (await js.stream_info("JSW_ACC_DLQ")).state.messages
        return [await js.get_msg("JSW_ACC_DLQ", seq) for seq in range(1, n + 1)]
    finally:
        await nc.close()


async def _publish_raw(url: str, items: list[tuple[str, bytes, dict[str, str]]]) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for subject, body, headers in items:
            await js.publish(subject, body, headers=headers)
    finally:
        await nc.close()


def test_bad_input_is_dead_lettered_and_work_goes_on(
    nats_server: NatsServer, app: Any, record: Path, tmp_path: Path
) -> None:
    """Unknown task, undecodable body, wrong arguments: each dead-lettered with a reason; good jobs run on."""
    with running_worker(nats_server.url, record, tmp_path / "w.log") as worker:
        app.record_async.delay(0)  # creates the streams
        wait_until(lambda: len(records(record)) == 1, timeout=20, message="the first job")
        asyncio.run(
            _publish_raw(
                nats_server.url,
                [
                    (
                        "jsw.acc.q.default.no_such_task",
                        b'{"args":[],"kwargs":{}}',
                        {"Nats-Msg-Id": "bad-unknown", "Jsw-Task": "no_such_task"},
                    ),
                    (
                        "jsw.acc.q.default.record_async",
                        b"\x00\xffnot json{",
                        {"Nats-Msg-Id": "bad-body", "Jsw-Task": "record_async"},
                    ),
                    (
                        "jsw.acc.q.default.record_async",
                        b'{"args":[1,2,3],"kwargs":{}}',
                        {"Nats-Msg-Id": "bad-args", "Jsw-Task": "record_async"},
                    ),
                ],
            )
        )
        after = [app.record_async.delay(i) for i in range(1, 21)]
        wait_until(lambda: len(records(record)) == 21, timeout=20, message="the good jobs after the bad ones")
        letters = {m.headers["Jsw-Job-Id"]: m for m in asyncio.run(_dead_letters(nats_server.url))}
        assert set(letters) == {"bad-unknown", "bad-body", "bad-args"}
        assert "unknown task" in letters["bad-unknown"].headers["Jsw-Dlq-Reason"]
        assert "undecodable" in letters["bad-body"].headers["Jsw-Dlq-Reason"]
        assert "bad arguments" in letters["bad-args"].headers["Jsw-Dlq-Reason"]
        assert letters["bad-body"].data == b"\x00\xffnot json{"
        assert set(counts(record)) >= {j.id for j in after}
        assert stream_messages(nats_server.url, "JSW_ACC") == 0
        assert worker.poll() is None


@pytest.mark.parametrize("job_seconds,grace,finishes_here", [(3.0, 1.0, False), (1.0, 10.0, True)])
@pytest.mark.slow
def test_sigterm_with_jobs_in_flight_loses_nothing(
    nats_server: NatsServer,
    app: Any,
    record: Path,
    tmp_path: Path,
    job_seconds: float,
    grace: float,
    finishes_here: bool,
) -> None:
    """SIGTERM mid-run: exit within grace + 2 s; every job completes here or on the next worker."""
    jobs = [app.sleep_async.delay(job_seconds) for _ in range(10)]
    first = start_worker(nats_server.url, record, tmp_path / "w1.log", "-c", "5", "--grace", str(grace))
    try:
        wait_until(lambda: len(records(record, "start")) >= 5, timeout=20, message="5 jobs to start")
        started = time.monotonic()
        stop(first, timeout=grace + 10)
        took = time.monotonic() - started
    finally:
        stop(first)
    assert first.returncode == 0, (tmp_path / "w1.log").read_text()
    assert took <= grace + 2.0, f"worker took {took:.2f}s to stop with grace {grace}s"
    done_on_first = {job_id for job_id, _, pid in records(record) if pid == first.pid}
    if finishes_here:
        assert len(done_on_first) == 5
    else:
        assert not done_on_first
    with running_worker(nats_server.url, record, tmp_path / "w2.log"):
        wait_until(
            lambda: set(counts(record)) >= {j.id for j in jobs}, timeout=30, message="every job to complete"
        )
        wait_consumer_settled(nats_server.url, "JSW_ACC", "slow")
    done = counts(record)
    assert max(done.values()) == 1
    assert stream_messages(nats_server.url, "JSW_ACC") == 0


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_worker_runs_on_the_chosen_event_loop(
    nats_server: NatsServer, app: Any, record: Path, tmp_path: Path, loop: str
) -> None:
    """--loop picks the event loop (the start event names it) and jobs run on either."""
    log = tmp_path / "w.log"
    with running_worker(nats_server.url, record, log, "--loop", loop, "--log-level", "info"):
        jobs = [app.record_async.delay(i) for i in range(50)] + [app.record_sync.delay(i) for i in range(50)]
        wait_until(lambda: len(records(record)) >= 100, timeout=30, message="100 executions")
    assert set(counts(record)) == {j.id for j in jobs}
    started = [line for line in log.read_text().splitlines() if "worker.started" in line]
    assert len(started) == 1 and f"loop={loop}" in started[0]
