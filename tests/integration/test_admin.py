"""``Admin(app)`` against a real nats-server: paged job listings in every state, in bounded
memory, and the actions it carries out."""

from __future__ import annotations

import asyncio
import json
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from jsworker import App, ConfigurationError, Retry
from jsworker._lifecycle.state import JobState
from jsworker.admin import Admin, JobSummary
from jsworker.testing import NatsServer

from ..support import wait_until_async
from .secured import as_user, provision, role_app
from .workers import APPS, cli, in_process_worker, start_worker, stop

sys.path.insert(0, str(APPS))
import life_cli_app

pytestmark = pytest.mark.anyio

JOBS = 10_000
PAGE = 500
BODY = 2000  # bytes of argument a job: 10,000 of them are 20 MB


@pytest.mark.slow
async def test_ten_thousand_queued_jobs_page_in_order_holding_one_page(nats_server: NatsServer) -> None:
    app = App("adm", nats_server.url)

    @app.task
    async def work(blob: str, n: int) -> None: ...

    await app.provision()  # its consumer too: nothing delivered yet, so every job is queued
    ids = [job.id for job in await work.adelay_many([("x" * BODY, n) for n in range(JOBS)])]
    await app.aclose()

    async with Admin(app) as admin:
        await admin.connection()
        tracemalloc.start()
        try:
            seen, after, pages = 0, None, 0
            while True:
                page = await admin.jobs(queue="default", state="queued", limit=PAGE, after=after)
                # One read a job listed (one more for the last page, which finds the end).
                assert page.reads <= PAGE + 1, page.reads
                assert [job.id for job in page.items] == ids[seen : seen + len(page.items)]
                assert {job.state for job in page.items} <= {JobState.QUEUED}
                seen += len(page.items)
                pages += 1
                if page.next_after is None:
                    break
                assert len(page.items) == PAGE
                after = page.next_after
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert seen == JOBS and pages in (JOBS // PAGE, JOBS // PAGE + 1)
        # The bodies alone would be 20 MB: the Admin held one page of headers at a time.
        assert peak < JOBS * BODY / 8, peak

        newest = await admin.jobs(queue="default", limit=PAGE, newest_first=True)
        assert [job.id for job in newest.items] == ids[::-1][:PAGE]
        older = await admin.jobs(queue="default", limit=PAGE, after=newest.next_after, newest_first=True)
        assert [job.id for job in older.items] == ids[::-1][PAGE : 2 * PAGE]
        # Read backwards in windows: a dense queue costs about one read a job.
        assert older.reads <= 2 * PAGE, older.reads
        first = older.items[0]
        assert (first.queue, first.task, first.seq) == ("default", "work", int(newest.next_after or 0) - 1)
        assert first.enqueued_at is not None and first.attempts is None


async def test_running_and_retrying_jobs_are_listed_with_their_worker(nats_server: NatsServer) -> None:
    app = App("adm", nats_server.url)
    gate = asyncio.Event()
    started: list[str] = []

    @app.task
    async def hold(tag: str) -> None:
        started.append(tag)
        await gate.wait()

    @app.task(max_retries=3)
    async def flaky() -> None:
        raise Retry(60, reason="not yet")

    await app.provision()
    held = [await hold.adelay(f"h{n}") for n in range(3)]
    failing = await flaky.adelay()
    await app.aclose()  # the worker's connection takes over this loop's enqueues
    async with in_process_worker(app, concurrency=4), Admin(app) as admin:
        await wait_until_async(lambda: len(started) == 3, timeout=10, message="three jobs to start")
        (worker,) = await wait_until_async(admin.workers, timeout=10, message="the worker's entry")
        retrying = await wait_until_async(
            lambda: admin.jobs(state="retrying"), until=lambda page: page.items, timeout=10
        )
        (job,) = retrying.items
        assert (job.id, job.state, job.task, job.attempts) == (failing.id, JobState.RETRYING, "flaky", 1)
        assert job.next_attempt_at is not None and job.reason and "not yet" in job.reason
        running = await admin.jobs(state="running", limit=2)
        more = await admin.jobs(state="running", limit=2, after=running.next_after)
        listed: list[JobSummary] = [*running.items, *more.items]
        assert [j.id for j in listed] == [j.id for j in held] and more.next_after is None
        assert {(j.state, j.worker, j.attempts) for j in listed} == {(JobState.RUNNING, worker.id, 1)}
        assert all(j.started_at is not None for j in listed)
        newest = await admin.jobs(queue="default", state="running", newest_first=True)
        assert [j.id for j in newest.items] == [j.id for j in reversed(held)]
        assert (await admin.jobs(state="queued")).items == ()
        assert len((await admin.jobs(state="running", task="hold")).items) == 3
        assert (await admin.jobs(state="running", task="flaky")).items == ()
        assert [j.id for j in (await admin.jobs(state="retrying", task="flaky")).items] == [failing.id]
        gate.set()


async def test_delayed_jobs_list_by_due_time_and_dead_letters_by_sequence(nats_server: NatsServer) -> None:
    app = App("adm", nats_server.url)

    @app.task
    async def later(n: int) -> None: ...

    @app.task(queue="other")
    async def elsewhere() -> None: ...

    @app.task(max_retries=0)
    async def boom(n: int) -> None:
        raise ValueError(f"boom {n}")

    await app.provision()
    countdowns = [300, 100, 500, 200, 400]
    delayed = [await later.aapply((n,), countdown=c) for n, c in enumerate(countdowns)]
    other = await elsewhere.aapply(countdown=250)
    by_due = [job.id for _, job in sorted(zip(countdowns, delayed, strict=True), key=lambda p: p[0])]
    async with Admin(app) as admin:
        first = await admin.jobs(queue="default", state="scheduled", limit=2)
        rest = await admin.jobs(queue="default", state="scheduled", limit=10, after=first.next_after)
        assert [j.id for j in (*first.items, *rest.items)] == by_due and rest.next_after is None
        assert first.items[0].scheduled_for == delayed[1].scheduled_for and first.items[0].task == "later"
        everywhere = await admin.jobs(state="scheduled", newest_first=True)
        assert [j.id for j in everywhere.items] == [*by_due[::-1][:3], other.id, *by_due[::-1][3:]]
        assert [j.id for j in (await admin.jobs(state="scheduled", task="elsewhere")).items] == [other.id]
        assert await admin.cancel(delayed[2].id)
        assert (await admin.job(delayed[2].id)).state is JobState.CANCELLED
        assert len((await admin.jobs(state="scheduled")).items) == 5

    failed = [await boom.adelay(n) for n in range(5)]
    await app.aclose()
    async with in_process_worker(app, queues=["default"]), Admin(app) as admin:
        await wait_until_async(admin.count_dead_letters, until=lambda n: n == 5, timeout=15)
        first_letters = await admin.dead_letters(limit=3)
        rest_letters = await admin.dead_letters(limit=3, after=first_letters.next_after)
        letters = [*first_letters.items, *rest_letters.items]
        assert [d.job_id for d in letters] == [j.id for j in failed] and rest_letters.next_after is None
        newest = await admin.jobs(state="failed", task="boom", limit=2, newest_first=True)
        assert [j.id for j in newest.items] == [failed[4].id, failed[3].id]
        assert (newest.items[0].state, newest.items[0].attempts) == (JobState.FAILED, 1)
        assert newest.items[0].reason and newest.items[0].finished_at is not None
        replayed = await admin.replay_dead_letters([letters[0].seq])
        assert [job.id for job in replayed] == [failed[0].id]
        await wait_until_async(admin.count_dead_letters, until=lambda n: n == 5, timeout=15)  # fails again
        assert await admin.purge_dead_letters(task="boom") == 5
        assert (await admin.dead_letters()).items == ()


async def test_listing_arguments_are_checked(nats_server: NatsServer) -> None:
    app = App("adm", nats_server.url)
    bad: list[dict[str, Any]] = [
        {"state": "done"},
        {"limit": 0},
        {"limit": 10_001},
        {"queue": "no.dots"},
        {"after": "x"},
        {"state": "scheduled", "after": "12"},
    ]
    async with Admin(app) as admin:
        for arguments in bad:
            with pytest.raises(ConfigurationError):
                await admin.jobs(**arguments)
        # Nothing stored yet, no stream yet: empty pages, not errors.
        for state in ("scheduled", "queued", "running", "retrying", "failed"):
            page = await admin.jobs(state=state)
            assert (page.items, page.next_after) == ((), None)


async def test_the_operator_role_may_do_all_of_it(secured: NatsServer, tmp_path: Path) -> None:
    """With only the permissions ``jsworker permissions`` prints for an operator, every
    listing and the cancel work, and the worker is refused nothing."""
    url, gate, log = secured.url, tmp_path / "gate", tmp_path / "worker.log"
    provision(url)
    worker = start_worker(
        url, tmp_path / "record", log, "--log-level", "info", module="perm_app", env=as_user("perm-worker")
    )
    operator = role_app(url, "perm-operator")
    try:
        async with Admin(operator) as admin:
            (entry,) = await wait_until_async(admin.workers, timeout=20, message="the worker's entry")
            producer = role_app(url, "perm-producer")
            held, waiting = [await producer.tasks["hold"].adelay(str(gate)) for _ in range(2)]
            refused = await producer.tasks["refuse"].adelay()
            later = await producer.tasks["add"].aapply((1, 2), countdown=300)
            await producer.aclose()
            # The refused job first: until its dead letter is written and its message acked it
            # is running too.
            failed = await wait_until_async(
                lambda: admin.jobs(state="failed"), until=lambda page: page.items, timeout=20
            )
            assert [j.id for j in failed.items] == [refused.id]
            # Handed out and answered for by its worker (under load a listing can come between
            # the delivery and the worker's first answer, and shows no worker yet; or between
            # the refused job's dead letter and its ack, and shows it still running).
            running = await wait_until_async(
                lambda: admin.jobs(state="running"),
                until=lambda page: [j.id for j in page.items] == [held.id] and page.items[0].worker,
                timeout=20,
            )
            assert [(j.id, j.worker) for j in running.items] == [(held.id, entry.id)]
            assert [j.id for j in (await admin.jobs(queue="gated")).items] == [waiting.id]
            assert [j.id for j in (await admin.jobs(state="scheduled")).items] == [later.id]
            assert (await admin.jobs(state="retrying")).items == ()
            assert {q.queue for q in await admin.queues()} == {"default", "gated"}
            assert await admin.schedules() == []
            assert (await admin.job(held.id)).state is JobState.RUNNING
            assert await admin.cancel(later.id)
            gate.touch()
            await wait_until_async(
                lambda: admin.jobs(state="running"), until=lambda page: not page.items, timeout=20
            )
    finally:
        gate.touch()  # a failed assertion must not leave the held job keeping the worker from stopping
        assert stop(worker) == 0
    assert "permission" not in log.read_text().lower()


def test_jobs_list_prints_a_page_and_the_next_cursor(nats_server: NatsServer) -> None:
    url = nats_server.url
    app: App = life_cli_app.app
    app.servers = url
    try:
        jobs = [app.tasks["square"].delay(n) for n in range(3)]
        later = app.tasks["square"].apply((9,), countdown=600)
    finally:
        app.close()
    first = cli(url, "jobs", "list", "life_cli_app", "--limit", "2")
    assert first.returncode == 0, first.stderr
    header, *rows, cursor = first.stdout.splitlines()
    assert header.split() == ["ID", "TASK", "QUEUE", "STATE", "ATTEMPTS", "ENQUEUED/DUE", "WORKER"]
    assert [row.split()[:5] for row in rows] == [[j.id, "square", "default", "queued", "-"] for j in jobs[:2]]
    assert cursor == f"next: --after {jobs[1].seq}"
    rest = cli(url, "jobs", "list", "life_cli_app", "--limit", "2", *cursor.split()[1:])
    assert rest.stdout.splitlines()[1].split()[0] == jobs[2].id and rest.stdout.endswith("(end)\n")
    shown = json.loads(cli(url, "jobs", "list", "life_cli_app", "--state", "scheduled", "--json").stdout)
    assert [(j["id"], j["state"]) for j in shown["items"]] == [(later.id, "scheduled")]
    assert later.scheduled_for is not None
    assert shown["items"][0]["scheduled_for"] == later.scheduled_for.isoformat()
    assert shown["next_after"] is None
    assert cli(url, "jobs", "list", "life_cli_app", "--state", "running").stdout == "no running jobs\n(end)\n"
    bad = cli(url, "jobs", "list", "life_cli_app", "--after", "soon")
    assert bad.returncode == 2 and "not a cursor" in bad.stderr, bad
    assert cli(url, "jobs", "list", "life_cli_app", "--state", "done").returncode == 2
