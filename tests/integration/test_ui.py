"""The dashboard (``jsworker.ui``) against a real nats-server: every page with jobs in every
state, every action and what it did on the server, the live feed, and the dashboard mounted
in another app. Security and failures: ``test_ui_security.py``."""

from __future__ import annotations

import asyncio
import html
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import structlog
from starlette.applications import Starlette
from starlette.routing import Mount

from jsworker import App, DeadLetterNotFound, Job, Retry
from jsworker._lifecycle.state import JobState
from jsworker.admin import Admin
from jsworker.jetstream.session import SessionRole
from jsworker.testing import NatsServer
from jsworker.ui import create_app

from ..support import wait_until_async
from .ui_support import client, csrf_of, no_traceback, post, served
from .workers import in_process_worker

pytestmark = pytest.mark.anyio


@dataclass
class Scene:
    """An app with a job in every state, a dead letter and a schedule."""

    app: App
    gate: asyncio.Event
    queued: Job
    scheduled: Job
    running: Job
    retrying: Job
    failed: Job
    succeeded: Job


@asynccontextmanager
async def scene(url: str) -> AsyncIterator[Scene]:
    """The scene, with its worker running for the block."""
    app = App("dash", url)
    app.queue("slow", max_running=1)
    gate = asyncio.Event()

    @app.task(queue="slow")
    async def hold(tag: str) -> None:
        await gate.wait()

    @app.task(max_retries=5)
    async def flaky() -> None:
        raise Retry(300, reason="not yet")

    @app.task(max_retries=0)
    async def broken(secret: str) -> None:
        raise ValueError("it broke")

    @app.task(store_result=True)
    async def add(a: int, b: int) -> int:
        return a + b

    app.schedule(add, every=3600, name="hourly", args=(1, 1))
    async with in_process_worker(app) as worker, Admin(app) as admin:
        running = await hold.adelay("first")
        queued = await hold.adelay("second")  # behind the first: one at a time on "slow"
        scheduled = await add.aapply((2, 3), countdown=600)
        retrying = await flaky.adelay()
        failed = await broken.adelay("do-not-log-me")
        succeeded = await add.adelay(20, 22)
        await wait_until_async(lambda: admin.job(retrying.id), until=lambda s: s.state is JobState.RETRYING)
        await wait_until_async(lambda: admin.job(failed.id), until=lambda s: s.state is JobState.FAILED)
        await wait_until_async(lambda: admin.job(running.id), until=lambda s: s.state is JobState.RUNNING)
        await wait_until_async(lambda: admin.job(succeeded.id), until=lambda s: s.state is JobState.SUCCEEDED)
        await wait_until_async(admin.workers, message="the worker's registry entry")
        assert worker.conn is not None
        yield Scene(app, gate, queued, scheduled, running, retrying, failed, succeeded)
        gate.set()


async def test_every_page_shows_what_the_server_holds(nats_server: NatsServer) -> None:
    async with scene(nats_server.url) as s, client(create_app(s.app)) as http, Admin(s.app) as admin:
        # The queued tab shows the consumer's own count of undelivered jobs. nats-server keeps
        # that as a running total, which now and then stays one above the stored jobs (2.15,
        # under load); the page shows the server's figure, whatever it is.
        waiting = {q.queue: q.pending for q in await admin.queues()}["slow"]
        assert waiting >= 1
        pages = {
            "/": ["slow", "default", "2.15", "Workers alive"],
            "/queues/slow": [s.queued.id, "Pause", "Purge"],
            "/queues/slow?order=newest": [s.queued.id],
            "/jobs": [s.queued.id],
            # Counts on the state tabs: per queue (in flight together), per task only failed.
            "/jobs?queue=slow": [
                f'queued <span class="count">{waiting}</span>',
                "In flight (running, reserved",
                "1 shown",
            ],
            "/jobs?task=broken": ['failed <span class="count">1</span>'],
            "/jobs?state=scheduled": [s.scheduled.id],
            "/jobs?state=running": [s.running.id, "Cancel selected"],
            "/jobs?state=retrying&task=flaky": [s.retrying.id, "not yet", "Run selected now"],
            "/jobs?state=failed&queue=default": [s.failed.id, "Replay selected"],
            f"/jobs/{s.running.id}": ["running", "Cancel", "Jsw-Task"],
            f"/jobs/{s.retrying.id}": ["retrying", "Run now", "not yet"],
            f"/jobs/{s.failed.id}": [
                "failed",
                "it broke",
                "Dead letters of broken, newest first",
                "Its dead letter #1",
                f'action="/jobs/{s.failed.id}/replay"',
            ],
            f"/jobs/{s.succeeded.id}": ["succeeded", "Show result"],
            f"/jobs/{s.succeeded.id}?show=result": ["42"],
            f"/jobs/{s.queued.id}?show=payload": ["second", "json"],
            "/dead-letters": [s.failed.id, "Replay selected", "Purge"],
            "/dead-letters?task=broken": [s.failed.id, "Replay all of broken"],
            "/dead-letters/1": [s.failed.id, "it broke", "Show payload"],
            "/dead-letters/1?show=payload": ["do-not-log-me"],
            "/dead-letters/purge": ["Purge dead letters?", "<b>1</b>"],
            "/queues/slow/purge": ["Purge queue", "<b>1</b> waiting"],
            "/schedules": ["hourly", "@every 3600s", "Trigger now"],
            "/workers": ["default, slow"],
            "/job": ["Find a job"],
        }
        for path, expected in pages.items():
            response = await http.get(path)
            no_traceback(response)
            assert response.status_code == 200, (path, response.text)
            main = response.text.split("<main", 1)[-1].split("</main>", 1)[0]
            for text in expected:
                assert text in response.text, (path, text, main)  # the page's own part, whole
        # The payload and the result only after the click.
        assert "do-not-log-me" not in (await http.get("/dead-letters/1")).text
        assert "second" not in (await http.get(f"/jobs/{s.queued.id}")).text
        found = await http.get("/job", params={"id": s.queued.id})
        assert (found.status_code, found.headers["location"]) == (303, f"/jobs/{s.queued.id}")
        # A task's name lists its jobs, a queue's opens it, #<n> opens that dead letter.
        for term, target in (
            ("broken", "/jobs?task=broken"),
            ("slow", "/queues/slow"),
            (" #1 ", "/dead-letters/1"),
        ):
            led = await http.get("/job", params={"id": term})
            assert (led.status_code, led.headers["location"]) == (303, target), term
        for asset, kind in (("/static/app.css", "text/css"), ("/static/app.js", "javascript")):
            served_asset = await http.get(asset)
            assert served_asset.status_code == 200 and kind in served_asset.headers["content-type"]
        http.cookies.clear()
        page = await http.get("/")
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert (
            "jsw_session" in page.headers["set-cookie"] and "httponly" in page.headers["set-cookie"].lower()
        )


async def test_pages_page_both_ways(nats_server: NatsServer) -> None:
    app = App("paging", nats_server.url)

    @app.task
    async def work(n: int) -> None: ...

    await app.provision()
    jobs = [await work.adelay(n) for n in range(7)]
    await app.aclose()
    ids = [job.id for job in jobs]

    def listed(html: str) -> list[str]:
        return [i for i in re.findall(r'name="id" value="([0-9a-f]+)"', html)]

    def cursor(html: str, rel: str) -> str | None:
        found = re.search(rf'rel="{rel}" href="[^"]*?(?:after|before)=([^"&]+)', html)
        return found[1] if found else None

    async with client(create_app(app)) as http:
        first = (await http.get("/jobs?limit=3")).text
        assert listed(first) == ids[:3] and cursor(first, "prev") is None
        second = (await http.get(f"/jobs?limit=3&after={cursor(first, 'next')}")).text
        assert listed(second) == ids[3:6]
        back = (await http.get(f"/jobs?limit=3&before={cursor(second, 'prev')}")).text
        assert listed(back) == ids[:3] and cursor(back, "prev") is None
        newest = (await http.get("/queues/default?order=newest&limit=3")).text
        assert listed(newest) == ids[::-1][:3]
        older = (await http.get(f"/queues/default?order=newest&limit=3&after={cursor(newest, 'next')}")).text
        assert listed(older) == ids[::-1][3:6]
        newer = (await http.get(f"/queues/default?order=newest&limit=3&before={cursor(older, 'prev')}")).text
        assert listed(newer) == ids[::-1][:3]


@pytest.mark.usefixtures("info_logging")
async def test_every_action_does_what_it_says(nats_server: NatsServer) -> None:
    async with scene(nats_server.url) as s, client(create_app(s.app)) as http, Admin(s.app) as admin:
        with structlog.testing.capture_logs() as logged:
            done = await post(http, "/queues/slow/pause", page="/queues/slow")
            assert done.status_code == 303 and done.headers["location"] == "/queues/slow"
            assert {q.queue: q.paused for q in await admin.queues()}["slow"]
            shown = await http.get(done.headers["location"])
            assert "Paused slow" in shown.text and "Resume" in shown.text
            assert (await post(http, "/queues/slow/resume")).status_code == 303
            assert not {q.queue: q.paused for q in await admin.queues()}["slow"]

            assert (await post(http, f"/jobs/{s.running.id}/cancel")).status_code == 303
            assert (await admin.job(s.running.id)).state is JobState.CANCELLED
            job_page = await post(http, f"/jobs/{s.running.id}/retry")
            assert job_page.status_code == 303
            shown = await http.get(job_page.headers["location"])
            assert "is not waiting for a retry or a snooze" in shown.text

            # Every job of one task in a queue, on every page, from the filtered list.
            filtered = {"state": "queued", "queue": "slow", "task": "hold"}
            listed = (await http.get("/jobs", params=filtered)).text
            assert 'href="/queues/slow/purge?task=hold"' in listed
            asked = html.unescape((await http.get("/queues/slow/purge", params={"task": "hold"})).text)
            assert "Purge the jobs of task <code>hold</code> in <code>slow</code>?" in asked
            assert 'name="task" value="hold"' in asked
            wrong = await post(http, "/queues/slow/purge", {"confirm": "slow", "task": "hold"})
            assert wrong.headers["location"] == "/queues/slow/purge?task=hold"
            # A mistyped confirmation goes back to the question, saying why; nothing goes.
            refused = await post(http, "/queues/slow/purge", {"confirm": "wrong"})
            assert refused.status_code == 303 and refused.headers["location"] == "/queues/slow/purge"
            asked = html.unescape((await http.get(refused.headers["location"])).text)
            assert "Nothing purged: type the queue's name (slow) to confirm." in asked
            assert "Type the queue's name to confirm" in asked
            assert (await post(http, "/queues/slow/purge", {"confirm": "slow"})).status_code == 303
            assert "Purged" in (await http.get("/queues/slow")).text
            # The job waiting behind the cancelled one had started by then; its message went too.
            assert (await admin.job(s.queued.id)).state in (JobState.UNKNOWN, JobState.RUNNING)

            retried = await post(http, "/jobs/retry", {"id": [s.retrying.id], "next": "/jobs?state=retrying"})
            assert retried.headers["location"] == "/jobs?state=retrying"
            assert "1 of 1 job will run again now." in (await http.get("/jobs?state=retrying")).text
            # One that was not waiting: said why.
            again = await post(http, "/jobs/retry", {"id": [s.retrying.id, s.succeeded.id]})
            told = html.unescape((await http.get(again.headers["location"])).text)
            assert "of 2 jobs will run again now: the others were not waiting out a retry" in told

            cancelled = await post(http, "/jobs/cancel", {"id": [s.scheduled.id, s.succeeded.id]})
            assert cancelled.status_code == 303
            assert "Cancelled 1 of 2 jobs" in (await http.get("/")).text
            assert (await admin.job(s.scheduled.id)).state is JobState.CANCELLED

            replayed = await post(http, "/jobs/replay", {"seq": ["1"]})
            assert replayed.status_code == 303
            with pytest.raises(DeadLetterNotFound):
                await admin.dead_letter(1)  # replayed: it fails again as a new dead letter
            await wait_until_async(lambda: admin.count_dead_letters(), until=lambda n: n == 1, timeout=10)
            letter = (await admin.dead_letters()).items[0]
            assert (await post(http, "/dead-letters/replay", {"seq": [str(letter.seq)]})).status_code == 303
            await wait_until_async(lambda: admin.count_dead_letters(), until=lambda n: n == 1, timeout=10)
            # Replayed from the failed job's own page: back to that page, which follows it.
            newest = (await admin.dead_letter(s.failed.id)).seq
            from_page = await post(http, f"/jobs/{s.failed.id}/replay")
            assert from_page.headers["location"] == f"/jobs/{s.failed.id}"
            told = html.unescape((await http.get(from_page.headers["location"])).text)
            assert f"Replayed dead letter #{newest}: {s.failed.id} runs again, from attempt 1." in told
            await wait_until_async(lambda: admin.count_dead_letters(), until=lambda n: n == 1, timeout=10)
            # Every one of a task: replayed beside the request, the page saying so meanwhile.
            (before,) = (await admin.dead_letters()).items
            everything = await post(http, "/dead-letters/replay", {"all_of_task": "broken"})
            assert everything.status_code == 303
            told = html.unescape((await http.get(everything.headers["location"])).text)
            assert "Replaying the dead letters of broken: their count below falls as they go." in told
            await wait_until_async(
                lambda: admin.dead_letters(),
                until=lambda page: [letter.seq > before.seq for letter in page.items] == [True],
                timeout=10,
                message="the replayed job's new dead letter",
            )
            await wait_until_async(
                lambda: http.get("/dead-letters"),
                until=lambda page: 'id="replaying"' not in page.text,
                timeout=10,
                message="the replay to end",
            )
            kept = await post(http, "/dead-letters/purge", {"confirm": "no", "task": "broken"})
            assert kept.headers["location"] == "/dead-letters/purge?task=broken"
            asked = html.unescape((await http.get(kept.headers["location"])).text)
            assert "Nothing purged: type purge to confirm." in asked
            # The question's words keep their spaces (a task's name, then "for good").
            assert "of task <b>broken</b> for\ngood" in asked
            assert await admin.count_dead_letters() == 1
            # One dead letter deleted from its own page; a second delete finds it gone.
            (last,) = (await admin.dead_letters()).items
            letter_page = (await http.get(f"/dead-letters/{last.seq}")).text
            assert f'action="/dead-letters/{last.seq}/delete"' in letter_page
            deleted = await post(http, f"/dead-letters/{last.seq}/delete", {"next": "/dead-letters"})
            assert deleted.headers["location"] == "/dead-letters"
            assert f"Deleted dead letter #{last.seq}." in (await http.get("/dead-letters")).text
            assert await admin.count_dead_letters() == 0
            again = await post(http, f"/dead-letters/{last.seq}/delete")
            gone = (await http.get(again.headers["location"])).text
            assert f"Dead letter #{last.seq} was gone already." in gone
            purged = await post(http, "/dead-letters/purge", {"confirm": "purge", "task": "broken"})
            assert purged.headers["location"] == "/dead-letters?task=broken"
            assert await admin.count_dead_letters() == 0

            # An action on many jobs writes one audit line of reasonable size.
            many_ids = [f"nosuch{i:02d}" for i in range(25)]
            assert (await post(http, "/jobs/cancel", {"id": many_ids})).status_code == 303

            for verb in ("pause", "resume", "trigger", "remove"):
                assert (await post(http, f"/schedules/hourly/{verb}")).status_code == 303, verb
            assert await admin.schedules() == []

    actions = [line for line in logged if line["event"] == "ui.action"]
    first = ["pause_queue", "resume_queue", "cancel", "retry_now", "purge_queue"]
    assert [a["action"] for a in actions][:5] == first
    assert all(a["who"] == "anonymous" for a in actions)
    cancel = [a for a in actions if a["action"] == "cancel"][1]
    assert cancel["job_ids"] == [s.scheduled.id, s.succeeded.id] and cancel["cancelled"] == [s.scheduled.id]
    # A whole task's replay: one line as it starts, one with its jobs once done.
    assert [a["action"] for a in actions if a.get("task") == "broken"][:2] == ["replay_started", "replay"]
    (large,) = [a for a in actions if a.get("job_ids_count") == 25]
    assert large["job_ids"] == many_ids[:20] and large["cancelled"] == []
    # Never a payload in the audit log.
    assert "do-not-log-me" not in json.dumps(actions, default=str)


async def test_a_new_app_is_shown_how_to_start(nats_server: NatsServer) -> None:
    """An app nothing was enqueued for and no worker runs: its job stream is "not created
    yet" (not "missing", nor "degraded" once the page goes live), and the overview and the
    workers page say how to start a worker, naming the app's module; once a worker runs,
    the hints are gone and the stream is healthy."""
    app = App("fresh", nats_server.url)

    @app.task
    async def work(n: int) -> None: ...

    async with client(create_app(app)) as http:
        overview = html.unescape((await http.get("/")).text)
        assert '<span data-live="health.state">not created yet</span>' in overview
        assert "Nothing was enqueued yet" in overview
        assert f"jsworker run {__name__}" in overview
        assert (await http.get("/live.json")).json()["health"]["state"] == "not created yet"
        workers = html.unescape((await http.get("/workers")).text)
        assert 'id="no-workers"' in workers and f"jsworker run {__name__}" in workers
        async with in_process_worker(app), Admin(app) as admin:
            await wait_until_async(admin.workers, timeout=10, message="the worker's entry")
            overview = (await http.get("/")).text
            assert 'id="getting-started"' not in overview
            assert '<span data-live="health.state">healthy</span>' in overview
            assert 'id="no-workers"' not in (await http.get("/workers")).text


@pytest.mark.slow
async def test_the_live_feed_pushes_fresh_figures(nats_server: NatsServer) -> None:
    app = App("live", nats_server.url)

    @app.task
    async def work(n: int) -> None: ...

    await app.provision()
    ui = create_app(app)
    async with served(ui) as base, httpx.AsyncClient(base_url=base, timeout=20) as http:
        first = (await http.get("/live.json")).json()
        assert first["queues"]["default"]["pending"] == 0 and first["error"] is None
        async with http.stream("GET", "/live") as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            events = stream.aiter_lines()
            seen: list[dict[str, object]] = []

            async def next_event() -> dict[str, object]:
                async for line in events:
                    if line.startswith("data: "):
                        doc: dict[str, object] = json.loads(line[6:])
                        return doc
                raise AssertionError("the stream ended")

            seen.append(await next_event())
            await work.adelay_many([(n,) for n in range(25)])
            while True:
                event = await asyncio.wait_for(next_event(), 20)
                queues = event["queues"]
                assert isinstance(queues, dict)
                if queues["default"]["pending"] == 25:
                    break
            assert event["totals"] == {**event["totals"], "waiting": 25}  # type: ignore[dict-item]
            assert set(event) >= {"at", "health", "order", "workers", "series"}
    await app.aclose()


async def test_mounted_in_another_app(nats_server: NatsServer) -> None:
    app = App("mounted", nats_server.url)

    @app.task
    async def work(n: int) -> None: ...

    await app.provision()
    await work.adelay(1)
    await app.aclose()
    ui = create_app(app)
    outer = Starlette(routes=[Mount("/ops/jobs", ui)])
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=outer), base_url="http://x") as http:
            page = await http.get("/ops/jobs/")
            assert page.status_code == 200
            assert 'href="/ops/jobs/queues/default"' in page.text and "/ops/jobs/static/app.css" in page.text
            assert "Path=/ops/jobs/" in page.headers["set-cookie"]
            paused = await http.post("/ops/jobs/queues/default/pause", data={"csrf": csrf_of(page.text)})
            assert paused.status_code == 303 and paused.headers["location"] == "/ops/jobs/queues/default"
            # A form's "next" never leads out of the dashboard. (A cancel would need a worker
            # to ask: the dashboard's role does not cancel on its own.)
            away = await http.post(
                "/ops/jobs/jobs/retry",
                data={"csrf": csrf_of(page.text), "id": "nope", "next": "https://evil.example/"},
            )
            assert away.headers["location"] == "/ops/jobs/"
    finally:
        await ui.state.dashboard.aclose()


def test_the_command_says_it_runs_as_the_dashboard_role(nats_server: NatsServer, tmp_path: Path) -> None:
    from .workers import cli

    shown = cli(nats_server.url, "ui", "--help")
    assert shown.returncode == 0 and "dashboard role" in shown.stdout and "--read-only" in shown.stdout
    # Its own role's inbox; mounted elsewhere, it may connect as the operator instead.
    app = App("roles", nats_server.url)
    assert create_app(app).state.dashboard.admin.role == "dashboard"
    roles: tuple[SessionRole, ...] = ("dashboard", "operator")
    for role in roles:
        admin = create_app(app, role=role).state.dashboard.admin
        assert admin.role == role and app.connect_options(admin.role).inbox == f"_jsw_inbox.roles.{role}"
    assert "--nats-token" in shown.stdout and "--token TOKEN" in shown.stdout
    bad = cli(nats_server.url, "ui", "life_cli_app", "--auth", "nopassword")
    assert bad.returncode == 2 and "user:password" in bad.stderr
