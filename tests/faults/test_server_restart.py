"""The nats-server is SIGKILLed and restarted on the same port and store under running workers."""

from __future__ import annotations

import random
import time
from types import ModuleType

import pytest

from jsworker._runtime.settings import WorkerSettings
from jsworker.testing import NatsServer

from ..support import consumer_state, wait_until
from .harness import (
    STREAM,
    Records,
    Workers,
    check_reruns,
    dead_letters,
    longest_gap,
    summarize,
    wait_stream_empty,
)

pytestmark = pytest.mark.faults


@pytest.mark.timeout(150)
def test_server_sigkill_restart_while_busy(
    nats_server: NatsServer, fault_app: ModuleType, workers: Workers, records: Records
) -> None:
    """5,000 jobs of 5-20 ms, two workers; after ~1,000 completions (4,000 jobs still in the
    stream, ~150 held by the workers) the server is SIGKILLed, and restarted on the same store
    once both workers lost it. Every job completes; jobs acked while the server was down come back
    (duplicates, reported); the stall is reported."""
    url = nats_server.url
    fault_app.app.servers = [url]
    rng = random.Random(2)
    jobs = fault_app.work.delay_many([(i, rng.uniform(5, 20)) for i in range(5000)])
    enqueued = {j.id for j in jobs}
    a = workers.start(url, "a", "-c", "200", "-Q", "default")
    b = workers.start(url, "b", "-c", "200", "-Q", "default")
    a.wait_started()
    b.wait_started()

    wait_until(
        lambda: len(records.done_ids()) >= 1000, timeout=60, interval=0.01, message="1,000 completions"
    )
    outstanding_at_kill = len(enqueued - records.done_ids())
    killed_at = time.monotonic()
    nats_server.kill()
    # The outage lasts until every worker has lost the server: the jobs they hold then
    # cannot be acked, which is what the restart must recover from.
    a.wait_logged("worker.disconnected")
    b.wait_logged("worker.disconnected")
    nats_server.restart()
    back_at = time.monotonic()

    wait_until(lambda: records.done_ids() >= enqueued, timeout=90, message="every job to complete")
    wait_stream_empty(url, 30)
    done_after = [r.at for r in records.of("done") if r.at >= back_at]
    summary = summarize(
        "server_sigkill_restart_busy",
        enqueued,
        records,
        dead_letters(url),
        outstanding_at_kill=outstanding_at_kill,
        downtime_s=round(back_at - killed_at, 3),
        first_completion_after_restart_s=round(min(done_after) - back_at, 3) if done_after else None,
        stall_s=round(longest_gap((r.at for r in records.of("done")), after=killed_at), 3),
    )
    assert a.alive() and b.alive(), (a.tail(), b.tail())
    assert summary["lost"] == 0
    assert summary["dead_lettered"] == 0


@pytest.mark.timeout(150)
def test_server_sigkill_leaves_buffered_jobs_unrun_until_the_server_hands_them_out_again(
    nats_server: NatsServer, fault_app: ModuleType, workers: Workers, records: Records
) -> None:
    """2,000 jobs of 100 ms, two workers with 5 slots and 200 jobs pulled ahead each: most of
    what they hold waits in their buffers. The server is SIGKILLed; once both workers know it
    and the jobs they were running are done, it restarts. No job starts while the server is
    away (its acknowledgement would be lost, and the server would hand the job out again), and
    only jobs started before the workers knew of the kill run twice: the buffered ones are
    forgotten, and run once, when the server hands them out again."""
    url = nats_server.url
    fault_app.app.servers = [url]
    enqueued = {j.id for j in fault_app.work.delay_many([(i, 100.0) for i in range(2000)])}
    a = workers.start(url, "a", "-c", "5", "--max-messages", "200", "-Q", "default")
    b = workers.start(url, "b", "-c", "5", "--max-messages", "200", "-Q", "default")
    a.wait_started()
    b.wait_started()
    wait_until(lambda: len(records.done_ids()) >= 100, timeout=60, message="100 completions")

    nats_server.kill()
    a.wait_logged("worker.disconnected")
    b.wait_logged("worker.disconnected")
    noticed_at = time.monotonic()
    # Started before both workers knew: a run whose acknowledgement may be lost.
    started_before = {r.job_id for r in records.of("start")}
    wait_until(
        lambda: records.done_ids() >= started_before, timeout=30, message="the jobs running at the kill"
    )
    nats_server.restart()
    back_at = time.monotonic()

    wait_until(lambda: records.done_ids() >= enqueued, timeout=120, message="every job to complete")
    wait_stream_empty(url, 30)
    started_away = [r.job_id for r in records.of("start") if noticed_at <= r.at < back_at]
    check_reruns(
        "server_sigkill_buffered", url, enqueued, records, started_before, (a, b),
        started_before_notice=len(started_before), started_while_away=len(started_away),
    )  # fmt: skip
    assert not started_away, f"{len(started_away)} jobs started while the server was away"


@pytest.mark.timeout(120)
def test_server_sigkill_restart_while_idle(
    nats_server: NatsServer, fault_app: ModuleType, workers: Workers, records: Records
) -> None:
    """An idle worker (its pull request waiting on an empty stream) loses the server to SIGKILL;
    the server comes back on the same store once the worker lost it, and new jobs are enqueued. The worker
    resumes within 2 x idle_heartbeat of the server's return: the pull request died with the
    server without a word, so only the reconnect hook or the heartbeat watchdog can renew it."""
    url = nats_server.url
    fault_app.app.servers = [url]
    worker = workers.start(url, "w", "-c", "50", "-Q", "default")
    worker.wait_started()
    before = {j.id for j in fault_app.work.delay_many([(i, 5.0) for i in range(100)])}
    wait_until(lambda: records.done_ids() >= before, timeout=30, message="the first 100 jobs")
    wait_stream_empty(url, 10)
    # Idle: every job acked, and the worker's pull request waiting on the server.
    wait_until(
        lambda: consumer_state(url, STREAM, "default"),
        until=lambda state: state.settled and state.waiting >= 1,
        timeout=10,
        message="the worker to wait idle with a pull request",
    )

    nats_server.kill()
    # The outage lasts until the worker has lost the server, and with it its pull request.
    worker.wait_logged("worker.disconnected")
    nats_server.restart()
    back_at = time.monotonic()
    after = {j.id for j in fault_app.work.delay_many([(i, 5.0) for i in range(100)])}
    enqueued_in_s = time.monotonic() - back_at

    bound = 2 * WorkerSettings().idle_heartbeat
    wait_until(
        lambda: records.done_ids() >= after, timeout=bound + 30, message="the jobs enqueued after the restart"
    )
    wait_stream_empty(url, 30)
    resumed_s = min(r.at for r in records.of("done") if r.job_id in after) - back_at
    summary = summarize(
        "server_sigkill_restart_idle",
        before | after,
        records,
        dead_letters(url),
        enqueue_after_restart_s=round(enqueued_in_s, 3),
        resumed_s=round(resumed_s, 3),
        bound_s=bound,
    )
    assert worker.alive(), worker.tail()
    assert summary["lost"] == 0
    assert resumed_s <= bound, f"first job after the restart ran {resumed_s:.2f}s after the server was back"
