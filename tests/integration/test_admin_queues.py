"""``Admin`` on a queue and a single job against a real nats-server: pause and resume (the
server's consumer pause), purge, retry now, a job's message and result, the stream's health;
and ``jsworker queues pause|resume``."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jsworker import App, ConfigurationError, Retry
from jsworker._lifecycle.state import JobState
from jsworker.admin import Admin
from jsworker.testing import NatsServer

from ..support import wait_until_async
from .secured import as_user, provision, role_app
from .workers import APPS, cli, in_process_worker, start_worker, stop

pytestmark = pytest.mark.anyio


@pytest.mark.slow
async def test_a_paused_queue_hands_out_nothing_until_resumed(nats_server: NatsServer) -> None:
    app = App("pq", nats_server.url)
    app.queue("other")
    ran: list[str] = []

    @app.task
    async def work(tag: str) -> None:
        ran.append(tag)

    @app.task(queue="other")
    async def elsewhere(tag: str) -> None:
        ran.append(tag)

    async with in_process_worker(app) as worker, Admin(app) as admin:
        state = await admin.pause_queue("default")
        assert (
            state.paused
            and state.until is not None
            and state.until > datetime.now(UTC) + timedelta(days=3650)
        )
        await work.adelay("while paused")
        await elsewhere.adelay("other queue")
        await wait_until_async(lambda: "other queue" in ran, timeout=10, message="the other queue's job")
        by_name = {q.queue: q for q in await admin.queues()}
        assert by_name["default"].paused and not by_name["other"].paused
        assert by_name["default"].pending == 1
        # A worker creating its consumers again (as one starting does) leaves the pause alone.
        await app.provision(worker.conn)
        assert {q.queue: q.paused for q in await admin.queues()}["default"]
        # The worker runs the other queue's jobs meanwhile: one more round trip through it.
        await elsewhere.adelay("later, other queue")
        await wait_until_async(
            lambda: "later, other queue" in ran, timeout=10, message="the other queue again"
        )
        assert "while paused" not in ran
        assert await admin.resume_queue("default") is True
        await wait_until_async(lambda: "while paused" in ran, timeout=10, message="the job after resume")
        assert await admin.resume_queue("default") is False
        assert not {q.queue: q.paused for q in await admin.queues()}["default"]
        assert {q.queue: q.delivered for q in await admin.queues()}["default"] == 1

        # A pause with an end ends by itself.
        await admin.pause_queue("default", datetime.now(UTC) + timedelta(seconds=1.5))
        await work.adelay("after the pause")
        await wait_until_async(lambda: "after the pause" in ran, timeout=15, message="the pause to end")

        with pytest.raises(ConfigurationError, match="declares no such queue"):
            await admin.pause_queue("nobody")
        with pytest.raises(ConfigurationError, match="invalid queue"):
            await admin.pause_queue("a.b")
        with pytest.raises(ConfigurationError, match="aware"):
            await admin.pause_queue("default", datetime(2099, 1, 1))


async def test_a_queue_paused_before_any_worker_served_it_starts_paused(nats_server: NatsServer) -> None:
    """Pausing ahead of a deploy: the queue has no consumer yet, so the pause makes it (as its
    first worker would) and pauses it; the worker that then starts takes none of its jobs
    until it is resumed. Resuming a queue that has no consumer says it was not paused."""
    app = App("ahead", nats_server.url)
    ran: list[int] = []

    @app.task
    async def work(n: int) -> None:
        ran.append(n)

    async with Admin(app) as admin:
        # A pause makes no stream: before anything was enqueued or provisioned, it says so.
        with pytest.raises(ConfigurationError, match="jsworker provision"):
            await admin.pause_queue("default")
        await work.adelay(1)  # the job stream now exists, the queue's consumer not yet
        assert await admin.resume_queue("default") is False
        assert (await admin.pause_queue("default")).paused
    async with in_process_worker(app) as worker, Admin(app) as admin:
        await wait_until_async(
            lambda: worker.conn is not None and worker.conn.is_connected, message="the worker connected"
        )
        by_name = {q.queue: q for q in await admin.queues()}
        assert by_name["default"].paused and by_name["default"].pending == 1
        assert ran == []
        assert await admin.resume_queue("default") is True
        await wait_until_async(lambda: ran == [1], timeout=10, message="the job after resume")


async def test_a_purge_removes_the_queues_jobs_and_leaves_its_delayed_ones(nats_server: NatsServer) -> None:
    app = App("pg", nats_server.url)
    app.queue("kept")

    @app.task
    async def work(n: int) -> None: ...

    @app.task(queue="kept")
    async def other(n: int) -> None: ...

    await app.provision()
    await work.adelay_many([(n,) for n in range(100)])
    later = await work.aapply((0,), countdown=600)
    await other.adelay(1)
    await app.aclose()
    async with Admin(app) as admin:
        assert await admin.purge_queue("default") == 100
        by_name = {q.queue: q for q in await admin.queues()}
        assert (by_name["default"].pending, by_name["default"].delayed, by_name["kept"].pending) == (0, 1, 1)
        assert (await admin.job(later.id)).state is JobState.SCHEDULED
        assert await admin.purge_queue("default") == 0


async def test_a_tasks_jobs_are_purged_from_every_partition_and_the_other_tasks_stay(
    nats_server: NatsServer,
) -> None:
    """Every job of one task in a queue, whatever listing page it is on and in every
    partition, goes with one purge per partition; another task's jobs in the same queue stay."""
    app = App("pgt", nats_server.url, partitions=2)

    @app.task
    async def bad(n: int) -> None: ...

    @app.task
    async def good(n: int) -> None: ...

    await app.provision()
    await bad.adelay_many([(n,) for n in range(300)])
    await good.adelay_many([(n,) for n in range(7)])
    await app.aclose()
    async with Admin(app) as admin:
        assert await admin.purge_queue("default", "bad") == 300
        assert {q.queue: q.pending for q in await admin.queues()}["default"] == 7
        assert {job.task for job in (await admin.jobs("default", limit=50)).items} == {"good"}
        with pytest.raises(ConfigurationError, match="invalid task"):
            await admin.purge_queue("default", "a.b")


async def test_retry_now_runs_a_retrying_job_at_once(nats_server: NatsServer) -> None:
    app = App("rn", nats_server.url)
    runs: list[int] = []

    @app.task(max_retries=3, store_result=True)
    async def flaky(n: int) -> int:
        runs.append(n)
        if len(runs) == 1:
            raise Retry(300, reason="later")
        return n * 2

    async with in_process_worker(app), Admin(app) as admin:
        job = await flaky.adelay(21)
        await wait_until_async(
            lambda: admin.job(job.id), until=lambda s: s.state is JobState.RETRYING, timeout=10
        )
        message = await admin.job_message(job.id)
        assert message is not None and message.body is not None and b"21" in message.body
        # Asked twice at once (two operators): one copy is stored, and it runs once.
        assert list(await asyncio.gather(admin.retry_now(job.id), admin.retry_now(job.id))) == [True, True]
        status = await wait_until_async(
            lambda: admin.job(job.id), until=lambda s: s.state is JobState.SUCCEEDED, timeout=10
        )
        assert runs == [21, 21] and status.id == job.id
        result = await admin.job_result(job.id)
        assert result is not None and result.value == b"42" and result.content_type == "application/json"
        assert await admin.retry_now(job.id) is False  # finished
        assert await admin.job_message(job.id) is None
        assert await admin.retry_now("never-enqueued") is False
        assert await admin.job_result("never-enqueued") is None


async def test_a_queued_job_is_not_retried_now_and_its_message_is_read(nats_server: NatsServer) -> None:
    app = App("rq", nats_server.url)

    @app.task
    async def work(n: int) -> None: ...

    await app.provision()
    job = await work.adelay(5)
    later = await work.aapply((6,), countdown=600)
    await app.aclose()
    async with Admin(app) as admin:
        assert await admin.retry_now(job.id) is False
        message = await admin.job_message(job.id)
        assert message is not None and message.headers["Jsw-Task"] == "work"
        scheduled = await admin.job_message(later.id)
        assert scheduled is not None and b"6" in (scheduled.body or b"")
        health = await admin.health()
        assert health.exists and health.healthy and health.server_version.count(".") == 2
        assert health.messages == 2 and health.replicas == ()


async def test_health_of_a_missing_stream(nats_server: NatsServer) -> None:
    async with Admin(App("never", nats_server.url)) as admin:
        health = await admin.health()
        assert not health.exists and not health.healthy


async def test_the_operator_role_may_pause_resume_and_purge(secured: NatsServer, tmp_path: Path) -> None:
    url, log = secured.url, tmp_path / "worker.log"
    provision(url)
    worker = start_worker(url, tmp_path / "record", log, module="perm_app", env=as_user("perm-worker"))
    operator = role_app(url, "perm-operator")
    try:
        async with Admin(operator) as admin:
            await wait_until_async(admin.workers, timeout=20, message="the worker's entry")
            assert (await admin.pause_queue("gated")).paused
            producer = role_app(url, "perm-producer")
            await producer.tasks["hold"].adelay(str(tmp_path / "gate"))
            await producer.aclose()
            assert {q.queue: q.pending for q in await admin.queues()}["gated"] == 1
            assert await admin.purge_queue("gated") == 1
            assert await admin.resume_queue("gated")
    finally:
        assert stop(worker) == 0
    assert "permission" not in log.read_text().lower()


def test_queues_pause_and_resume_commands(nats_server: NatsServer) -> None:
    url = nats_server.url
    assert APPS.is_dir()
    nothing = cli(url, "queues", "pause", "life_cli_app", "default")
    assert nothing.returncode == 2 and "jsworker provision" in nothing.stderr, nothing

    async def provision() -> None:
        app = App("lifecli", url)
        await app.provision(queues=[])  # the streams, no queue's consumer
        await app.aclose()

    asyncio.run(provision())
    # Paused before any worker served it (an operator pausing ahead of a deploy).
    ahead = cli(url, "queues", "pause", "life_cli_app", "default")
    assert ahead.returncode == 0 and ahead.stdout == "paused default\n", ahead
    # An undeclared queue has no consumer, and none is made for it.
    unknown = cli(url, "queues", "pause", "life_cli_app", "defualt")
    assert unknown.returncode == 2 and "declares no such queue" in unknown.stderr, unknown
    paused = cli(url, "queues", "pause", "life_cli_app", "default", "--for", "600")
    assert paused.returncode == 0 and paused.stdout.startswith("paused default until "), paused
    resumed = cli(url, "queues", "resume", "life_cli_app", "default")
    assert (resumed.returncode, resumed.stdout) == (0, "resumed default\n"), resumed
    again = cli(url, "queues", "resume", "life_cli_app", "default")
    assert again.stdout == "default was not paused\n"
