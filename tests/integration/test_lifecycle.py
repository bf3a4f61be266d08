"""A job's lifecycle against a real nats-server: results, status, cancel in every state,
unique jobs and expiry."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import structlog

from jsworker import (
    App,
    ConfigurationError,
    JobCancelled,
    JobExpired,
    JobFailed,
    JobNotFound,
    Retry,
    current_job,
)
from jsworker._core.queues import queue_status
from jsworker._lifecycle.bucket import record_message
from jsworker._lifecycle.lookup import current_message
from jsworker._lifecycle.state import JobRecord, JobState
from jsworker._runtime import jobbook as runtime_lifecycle
from jsworker._runtime.holders import attempts_said
from jsworker._wire.names import place_token
from jsworker.jetstream.service import gather
from jsworker.testing import NatsServer

from ..support import connected, connections, stream_messages_async, wait_until_async
from .workers import APPS, cli, in_process_worker, start_worker, stop

sys.path.insert(0, str(APPS))
import life_cli_app

pytestmark = pytest.mark.anyio


def _app(url: str, seen: dict[str, Any], **options: Any) -> App:
    app = App("life", url, **options)
    seen["gate"] = asyncio.Event()  # read at each run: a test may put a new one in
    seen["started"] = []
    seen["flag"] = threading.Event()
    _outcome_tasks(app)
    _holding_tasks(app, seen)
    return app


def _outcome_tasks(app: App) -> None:
    """Tasks that end at once, each in its own way."""

    @app.task(store_result=True)
    async def add(a: int, b: int) -> int:
        return a + b

    @app.task(store_result=True, max_retries=0)
    async def boom(n: int) -> None:
        raise ValueError(f"boom {n}")

    @app.task(store_result=True, max_retries=2, retry_backoff=30)
    async def flaky() -> str:
        if current_job().attempt == 1:
            raise RuntimeError("first attempt fails")
        return "ok"

    @app.task(store_result=True)
    async def unstorable() -> object:
        return object()

    @app.task
    async def plain(n: int) -> int:
        return n


def _holding_tasks(app: App, seen: dict[str, Any]) -> None:
    """Tasks that wait for the test (``seen``'s gate or flag) and note in ``seen`` that they started."""

    @app.task(store_result=True)
    async def hold(tag: str) -> str:
        seen["started"].append(tag)
        await seen["gate"].wait()
        return tag

    @app.task(store_result=True)
    def hold_sync(tag: str) -> str:
        seen["started"].append(tag)
        while not current_job().cancelled:
            if seen["flag"].wait(0.01):
                return tag
        seen["saw_cancel"] = tag
        return "stopped"

    @app.task(unique=True, store_result=True)
    async def report(user: int) -> int:
        seen["started"].append(f"report-{user}")
        await seen["gate"].wait()
        return user

    @app.task(unique_key=lambda order, note="": f"order-{order}")
    async def ship(order: int, note: str = "") -> None:
        await seen["gate"].wait()

    @app.task(queue="later", expires=0.3)
    async def stale() -> None:
        seen["started"].append("stale")


async def test_results_wait_by_watching_and_keep_errors(nats_server: NatsServer) -> None:
    seen: dict[str, Any] = {}
    app = _app(nats_server.url, seen)
    async with in_process_worker(app, queues=["default"]):
        job = await app.tasks["add"].adelay(2, 3)
        assert await job.aresult(timeout=10) == 5
        # The result is stored before the job is acked: until the ack lands it still runs.
        await wait_until_async(job.astatus, until=lambda s: s.state is JobState.SUCCEEDED, timeout=10)
        # The same handle from the id alone, as another process would make it.
        again = app.job(job.id)
        assert await again.aresult(timeout=5) == 5
        status = await app.astatus(job.id)
        assert status.state is JobState.SUCCEEDED and status.attempts == 1 and status.worker
        assert status.started_at is not None and status.finished_at is not None

        failed = await app.tasks["boom"].adelay(7)
        with pytest.raises(JobFailed) as caught:
            await failed.aresult(timeout=10)
        assert caught.value.error_type == "ValueError" and caught.value.error_message == "boom 7"
        assert "raise ValueError" in (caught.value.traceback or "")
        assert (await app.astatus(failed.id)).state is JobState.FAILED

        bad = await app.tasks["unstorable"].adelay()
        with pytest.raises(JobFailed, match="cannot be encoded"):
            await bad.aresult(timeout=10)

        flaky = await app.tasks["flaky"].adelay()
        await wait_until_async(
            lambda: app.astatus(flaky.id), until=lambda s: s.state is JobState.RETRYING, timeout=10,
            message="the failed first attempt to leave a retrying record",
        )  # fmt: skip
        retrying = await app.astatus(flaky.id)
        assert retrying.attempts == 1 and retrying.next_attempt_at is not None
        assert retrying.error is not None and retrying.error.type == "RuntimeError"

        with pytest.raises(TimeoutError):
            await (await app.tasks["hold"].adelay("never")).aresult(timeout=0.3)
        with pytest.raises(ConfigurationError, match="keeps no results"):
            await (await app.tasks["plain"].adelay(1)).aresult(timeout=1)
        with pytest.raises(JobNotFound):
            await app.job("no-such-job").aresult(timeout=1)
        assert (await app.astatus("no-such-job")).state is JobState.UNKNOWN
        seen["gate"].set()


def test_sync_result_and_status(nats_server: NatsServer) -> None:
    seen: dict[str, Any] = {}
    app = _app(nats_server.url, seen)

    async def main() -> None:
        async with in_process_worker(app, queues=["default"]):
            job = await asyncio.to_thread(app.tasks["add"].delay, 20, 22)
            assert await asyncio.to_thread(job.result, 10) == 42
            assert (await asyncio.to_thread(app.status, job.id)).state is JobState.SUCCEEDED

    try:
        asyncio.run(main())
    finally:
        app.close()


def test_an_id_no_job_can_have_is_unknown_not_an_error(nats_server: NatsServer) -> None:
    """User input with a dot (or a space) as a job id: a web app asking for its status or
    cancelling it hears of no such job, as for any other unknown id, instead of an error."""
    app = App("badids", nats_server.url)
    try:
        for given in ("order.42", "a b", "x" * 200):
            assert app.status(given).state is JobState.UNKNOWN
            assert app.cancel(given) is False
        with pytest.raises(ConfigurationError, match="invalid job_id"):
            app.status(42)  # type: ignore[arg-type]  # not an id at all: the caller's bug
    finally:
        app.close()


async def test_status_follows_a_job_from_queued_to_running(nats_server: NatsServer) -> None:
    seen: dict[str, Any] = {}
    app = _app(nats_server.url, seen)
    hold = app.tasks["hold"]
    await app.provision()
    queued = await hold.adelay("q")
    assert (await app.astatus(queued.id)).state is JobState.QUEUED
    later = await hold.aapply(("s",), countdown=60)
    scheduled = await app.astatus(later.id)
    assert scheduled.state is JobState.SCHEDULED and scheduled.scheduled_for == later.scheduled_for
    await app.aclose()  # the worker's connection takes over this loop's enqueues
    async with in_process_worker(app, queues=["default"]):
        await wait_until_async(lambda: seen["started"] == ["q"], timeout=10, message="the job to start")
        running = await app.astatus(queued.id)
        assert running.state is JobState.RUNNING and (running.queue, running.task) == ("default", "hold")
        seen["gate"].set()
        assert await queued.aresult(timeout=10) == "q"
    assert await app.acancel(later.id)
    assert (await app.astatus(later.id)).state is JobState.CANCELLED
    await app.aclose()


async def test_cancel_queued_running_and_finished_jobs(nats_server: NatsServer) -> None:
    seen: dict[str, Any] = {}
    app = _app(nats_server.url, seen)
    hold, hold_sync = app.tasks["hold"], app.tasks["hold_sync"]
    await app.provision()
    queued = await hold.adelay("queued")
    assert await app.acancel(queued.id)
    assert not await app.acancel(queued.id)  # nothing left to cancel
    assert (await app.astatus(queued.id)).state is JobState.CANCELLED
    with pytest.raises(JobCancelled):
        await queued.aresult(timeout=5)
    await app.aclose()  # the worker's connection takes over this loop's enqueues

    def starts() -> dict[str, float]:
        # Counters of a registry other tests of this module share: compared before and after.
        return {
            task: app.metrics.registry.get_sample_value(
                "jsworker_jobs_started_total", {"queue": "default", "task": task}
            )
            or 0.0
            for task in ("hold", "hold_sync", "add")
        }

    before = starts()
    async with in_process_worker(app, queues=["default"]):
        running = await hold.adelay("running")
        await wait_until_async(lambda: "running" in seen["started"], timeout=10, message="it to start")
        started = time.monotonic()
        assert await running.acancel()
        with pytest.raises(JobCancelled):
            await running.aresult(timeout=5)
        assert time.monotonic() - started < 1.0

        sync_job = await hold_sync.adelay("sync")
        await wait_until_async(lambda: "sync" in seen["started"], timeout=10, message="the sync job to start")
        assert await sync_job.acancel()
        await wait_until_async(
            lambda: seen.get("saw_cancel") == "sync", timeout=5, message="the thread to stop"
        )
        assert (await app.astatus(sync_job.id)).state is JobState.CANCELLED

        done = await app.tasks["add"].adelay(1, 1)
        assert await done.aresult(timeout=10) == 2
        assert not await app.acancel(done.id)
        assert (await app.astatus(done.id)).state is JobState.SUCCEEDED
        seen["gate"].set()
    # Nothing cancelled ran afterwards, nothing is left in the stream.
    assert seen["started"].count("queued") == 0
    assert await stream_messages_async(nats_server.url, "JSW_LIFE") == 0
    # Every start counts, those a cancel then stopped too.
    after = starts()
    assert {task: after[task] - before[task] for task in after} == {"hold": 1.0, "hold_sync": 1.0, "add": 1.0}
    await app.aclose()


async def test_unique_jobs_refuse_a_second_while_one_waits_or_runs(nats_server: NatsServer) -> None:
    seen: dict[str, Any] = {}
    app = _app(nats_server.url, seen)
    report, ship = app.tasks["report"], app.tasks["ship"]
    await app.provision()
    first = await report.adelay(42)
    second = await report.adelay(42)
    other = await report.adelay(43)
    assert not first.duplicate and second.duplicate and not other.duplicate
    assert second.id == first.id and second.seq == first.seq and other.id != first.id
    later = await report.aapply((44,), countdown=60)
    assert (await report.adelay(44)).duplicate  # scheduled counts
    assert (await report.aapply((44,), countdown=30)).duplicate
    assert (await ship.adelay(1, note="a")).id == (await ship.adelay(1, note="b")).id
    with pytest.raises(ConfigurationError, match="unique"):
        await report.aapply((1,), job_id="mine")
    await app.aclose()  # the worker's connection takes over this loop's enqueues
    async with in_process_worker(app, queues=["default"]):
        await wait_until_async(lambda: "report-42" in seen["started"], timeout=10, message="the job to start")
        assert (await report.adelay(42)).duplicate  # running counts
        seen["gate"].set()
        assert await first.aresult(timeout=10) == 42
        # Finished: the key is free, and the new run's receipt waits for its own result.
        seen["gate"] = asyncio.Event()
        rerun = await report.adelay(42)
        assert not rerun.duplicate and rerun.id == first.id and rerun.seq != first.seq
        with pytest.raises(TimeoutError):
            await rerun.aresult(timeout=0.3)
        seen["gate"].set()
    assert await app.acancel(later.id)
    await app.aclose()


async def test_fifty_producers_racing_on_one_key_make_one_job(nats_server: NatsServer) -> None:
    seen: dict[str, Any] = {}
    app = _app(nats_server.url, seen)
    await app.provision()
    apps = [App("life", nats_server.url) for _ in range(50)]
    for other in apps:
        other.task(unique=True, name="report")(app.tasks["report"].fn)
    try:
        jobs = await asyncio.gather(*(other.tasks["report"].adelay(7) for other in apps))
    finally:
        for other in apps:
            await other.aclose()
    await app.aclose()
    assert sum(not j.duplicate for j in jobs) == 1
    assert len({j.id for j in jobs}) == 1
    async with connected(nats_server.url) as nc:
        info = await nc.jetstream().stream_info("JSW_LIFE", subjects_filter="jsw.life.q.>")
        assert info.state.messages == 1


async def test_a_job_not_started_in_time_expires_unrun(nats_server: NatsServer) -> None:
    seen: dict[str, Any] = {}
    app = _app(nats_server.url, seen, events=True)
    stale = app.tasks["stale"]
    await app.provision()
    expired_after = time.time() + 0.3
    old = await stale.adelay()
    fresh = await stale.aapply(expires=60)
    await wait_until_async(lambda: time.time() > expired_after, timeout=5, message="the expiry to pass")
    await app.aclose()  # the worker's connection takes over this loop's enqueues
    async with in_process_worker(app, queues=["later"]):
        await wait_until_async(
            lambda: app.astatus(old.id), until=lambda s: s.state is JobState.EXPIRED, timeout=10,
            message="the stale job to expire",
        )  # fmt: skip
        await wait_until_async(
            lambda: seen["started"] == ["stale"], timeout=10, message="the fresh one to run"
        )
    assert (await app.astatus(fresh.id)).state is JobState.UNKNOWN  # a first-attempt success keeps no record
    assert app.metrics.expired.labels("later", "stale")._value.get() == 1
    with pytest.raises(JobExpired):
        await app.lifecycle.result(old.id, old.seq, timeout=1)
    await app.aclose()


async def test_max_running_is_the_consumers_limit_and_follows_the_code(nats_server: NatsServer) -> None:
    app = App("capped", nats_server.url, max_ack_pending=1000)

    @app.task(queue="payments")
    async def pay() -> None: ...

    @app.task(queue="mail")
    async def mail() -> None: ...

    app.queue("payments", max_running=5, priority=10)
    await app.provision()
    async with connected(nats_server.url) as nc:
        js = nc.jetstream()
        assert (await js.consumer_info("JSW_CAPPED", "payments")).config.max_ack_pending == 5
        assert (await js.consumer_info("JSW_CAPPED", "mail")).config.max_ack_pending == 1000
        app.queue("payments", max_running=2)  # changed in code: the next start applies it
        await app.provision()
        assert (await js.consumer_info("JSW_CAPPED", "payments")).config.max_ack_pending == 2
    rows = {q.queue: q for q in await queue_status(app)}
    assert (rows["payments"].max_running, rows["payments"].priority) == (2, 0)
    # The app's max_ack_pending bounds every queue: shown as no max_running of its own.
    assert (rows["mail"].max_running, rows["mail"].priority) == (None, 0)
    with pytest.raises(ConfigurationError, match="max_running"):
        app.queue("payments", max_running=0)
    await app.aclose()


async def test_a_freed_slot_goes_to_the_highest_priority_queue_with_jobs(nats_server: NatsServer) -> None:
    app = App("ranked", nats_server.url)
    order: list[str] = []
    gate = asyncio.Event()

    @app.task(queue="bulk")
    async def bulk(n: int) -> None:
        order.append(f"bulk-{n}")
        await gate.wait()

    @app.task(queue="urgent")
    async def urgent(n: int) -> None:
        order.append(f"urgent-{n}")

    app.queue("urgent", priority=10)
    await app.provision()
    await bulk.adelay(0)  # takes the one slot and holds it
    await app.aclose()
    async with in_process_worker(app, concurrency=1, max_messages=5) as worker:
        await wait_until_async(
            lambda: order == ["bulk-0"], timeout=10, message="the first job to hold the slot"
        )
        for n in range(1, 4):
            await bulk.adelay(n)
            await urgent.adelay(n)
        # Both queues have jobs buffered and waiting for the slot before it is freed.
        await wait_until_async(
            lambda: sum(len(list(c.buffered())) for c in worker._consumers.values()), until=lambda n: n == 6,
            timeout=10, message="six jobs buffered",
        )  # fmt: skip
        gate.set()
        await wait_until_async(lambda: len(order) == 7, timeout=10, message="every job to run")
    assert order == ["bulk-0", "urgent-1", "urgent-2", "urgent-3", "bulk-1", "bulk-2", "bulk-3"]


@pytest.mark.slow
def test_the_command_line_shows_status_and_results(nats_server: NatsServer, tmp_path: Path) -> None:
    url = nats_server.url
    unknown = cli(url, "jobs", "status", "life_cli_app", "no-such-job")
    assert unknown.returncode == 2 and "unknown" in unknown.stdout, unknown
    # Said plainly, not as an error of the command.
    assert "nothing is known of it" in unknown.stdout and "error" not in unknown.stderr, unknown
    app: App = life_cli_app.app
    app.servers = url
    try:
        good = app.tasks["square"].delay(7)
        bad = app.tasks["refuse"].delay(1)
        assert cli(url, "jobs", "status", "life_cli_app", good.id).stdout.split()[:2] == [good.id, "queued"]
        not_yet = cli(url, "jobs", "result", "life_cli_app", good.id)
        assert not_yet.returncode == 5 and "has not finished (queued)" in not_yet.stderr, not_yet
        worker = start_worker(url, tmp_path / "record", tmp_path / "log", module="life_cli_app")
        try:
            done = cli(url, "jobs", "result", "life_cli_app", good.id, "--wait", "20")
            assert (done.returncode, done.stdout.strip()) == (0, "49"), done
            failed = cli(url, "jobs", "result", "life_cli_app", bad.id, "--wait", "20")
            assert failed.returncode == 4 and "no 1" in failed.stderr, failed
        finally:
            stop(worker)
        shown = json.loads(cli(url, "jobs", "status", "life_cli_app", bad.id, "--json").stdout)
        assert shown["state"] == "failed" and shown["error"]["type"] == "Reject"
        cancelled = cli(url, "jobs", "cancel", "life_cli_app", good.id)
        assert cancelled.returncode == 2 and "already finished" in cancelled.stderr
    finally:
        app.close()


async def test_a_unique_job_cancelled_while_running_can_run_again(nats_server: NatsServer) -> None:
    """The cancel names the job's message: the next run of the same key, with the same id,
    is not taken for the cancelled one by the worker that heard the cancel."""
    seen: dict[str, Any] = {}
    app = _app(nats_server.url, seen)
    report = app.tasks["report"]
    async with in_process_worker(app, queues=["default"]):
        first = await report.adelay(5)
        await wait_until_async(lambda: seen["started"] == ["report-5"], timeout=10, message="it to start")
        assert await first.acancel()
        with pytest.raises(JobCancelled):
            await first.aresult(timeout=5)
        again = await report.adelay(5)
        assert not again.duplicate and again.id == first.id
        await wait_until_async(
            lambda: seen["started"] == ["report-5"] * 2, timeout=10, message="it to run again"
        )
        seen["gate"].set()
        assert await again.aresult(timeout=10) == 5


def _worker_connections(server: NatsServer) -> dict[str, int]:
    """The app's worker connections on ``server``: name -> messages it sent."""
    return {
        c["name"]: c["in_msgs"]
        for c in connections(server.monitoring_url)
        if c.get("name", "").startswith("jsworker:life:worker")
    }


async def test_records_go_on_a_connection_of_their_own_only_where_results_are_kept(
    nats_server: NatsServer,
) -> None:
    seen: dict[str, Any] = {}
    app = _app(nats_server.url, seen)
    async with in_process_worker(app, queues=["later"]):  # no task there keeps results
        assert set(_worker_connections(nats_server)) == {"jsworker:life:worker"}
    async with in_process_worker(app, queues=["default"]):
        before = _worker_connections(nats_server)
        assert set(before) == {"jsworker:life:worker", "jsworker:life:worker:records"}
        job = await app.tasks["add"].adelay(1, 2)
        assert await job.aresult(timeout=10) == 3
        after = _worker_connections(nats_server)
        assert after["jsworker:life:worker:records"] > before["jsworker:life:worker:records"]


async def test_the_idempotency_key_is_one_job_s_across_attempts_and_not_the_next_one_s(
    nats_server: NatsServer,
) -> None:
    """A unique task's two jobs share their id but not their idempotency key; the two
    attempts of one job (a retry) share both."""
    keys: list[tuple[str, str, int]] = []
    app = App("keys", nats_server.url, retry_backoff=0.01, retry_backoff_max=0.01)

    @app.task(unique=True)
    async def once(n: int) -> None:
        job = current_job()
        keys.append((job.id, job.idempotency_key, job.attempt))
        if job.attempt == 1 and len(keys) == 1:
            raise Retry(delay=0.01)

    async with in_process_worker(app) as worker:
        await once.adelay(1)
        # Ended, not only started: while it runs, its key is held and the next one a duplicate.
        await wait_until_async(
            lambda: len(keys) == 2 and worker.counts["succeeded"] == 1,
            timeout=10,
            message="both attempts of the first job",
        )
        await once.adelay(1)
        await wait_until_async(lambda: len(keys) == 3, timeout=10, message="the second job")
    (id1, key1, _), (id2, key2, attempt2), (id3, key3, _) = keys
    assert id1 == id2 == id3 and attempt2 == 2
    assert key1 == key2 != key3 and key1.startswith(id1)


async def test_a_kept_result_is_written_until_stored_while_its_bucket_is_down(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The jobs bucket gone as a job that keeps its result ends (what a leader election looks
    like to the worker: no answer). The worker holds the job and writes its record again; once
    the bucket is back the result is there, and the job ran once. Meanwhile the worker answers
    for the job as the holder of its delivery, not as having settled it: another worker handed
    the message again steps aside instead of acknowledging it unrun, which would leave the job
    ended with no record, should this worker die first."""
    monkeypatch.setattr(runtime_lifecycle, "_RECORD_PATIENCE", 0.5)  # the first writer gives up soon
    runs: list[int] = []
    app = App("keepdown", nats_server.url)

    @app.task(store_result=True)
    async def answer(x: int) -> int:
        runs.append(x)
        return 2 * x

    with structlog.testing.capture_logs() as logged:
        async with in_process_worker(app):
            await app.provision()
            async with connected(nats_server.url) as nc:
                await nc.jetstream().delete_stream(app.namespace.jobs_stream)
            job = await answer.adelay(21)
            await wait_until_async(
                lambda: [e for e in logged if e["event"] == "job.result_retrying"],
                timeout=15,
                message="its record tried again",
            )
            conn = await app.connections.connection()
            message = await current_message(app, conn, job.id)
            assert message is not None  # not acked
            place = place_token(message.seq, app.namespace.partition_in(message.subject))
            # What a worker handed the message again asks before running it.
            asked = app.namespace.held_subject(job.id)
            answers = await gather(conn, asked, place.encode(), wait=5, linger=0.5)
            assert attempts_said(answers) == ([1], False)
            await app.provision()  # the bucket back, as a new leader would be
            assert await job.aresult(timeout=30) == 42
    assert runs == [21]
    assert not [e for e in logged if e["event"] in ("job.record_failed", "job.result_unkept")]


async def test_an_expired_job_delivered_again_is_counted_once(nats_server: NatsServer) -> None:
    """A worker that recorded a job's expiry and then lost the acknowledgement that followed
    (its server killed in between) leaves the job to be delivered again. The next delivery
    finds the expiry in the job's record: it ends the job without counting, logging or
    telling of its expiry a second time."""
    app = App("expiring", nats_server.url, ack_wait=1)

    @app.task(expires=0.2)
    async def late() -> None: ...

    await app.provision()
    expired_after = time.time() + 0.2
    job = await late.adelay()
    await wait_until_async(lambda: time.time() > expired_after, timeout=5, message="the expiry to pass")
    async with connected(nats_server.url) as nc:
        # The first delivery, as the worker that recorded its expiry left it: unacknowledged.
        js = nc.jetstream()
        sub = await js.pull_subscribe_bind("default", app.namespace.stream)
        (taken,) = await sub.fetch(1, timeout=10)
        seq = taken.metadata.sequence.stream
        record = JobRecord(
            JobState.EXPIRED, "default", "late", seq=seq, reason="not started before it expired"
        )
        stored = record_message(app.namespace, job.id, record, 3600)
        await js.publish(stored.subject, stored.body, headers=dict(stored.headers))
    await app.aclose()
    async with in_process_worker(app) as worker:
        await wait_until_async(
            partial(stream_messages_async, nats_server.url, app.namespace.stream),
            until=lambda left: left == 0,
            timeout=20,
            message="the job acknowledged",
        )
    assert (worker.counts["skipped"], worker.counts["expired"]) == (1, 0), worker.counts
    assert app.metrics.expired.labels("default", "late")._value.get() == 0
    assert (await app.astatus(job.id)).state is JobState.EXPIRED
    await app.aclose()
