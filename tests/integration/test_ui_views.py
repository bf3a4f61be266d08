"""The dashboard's views of job events, workflows and the jobs each worker runs, against a real
nats-server: the overview's charts from the events stream (there from a restarted dashboard's
first reading), a job's events timeline and its workflow on its page, and the workers page
listing each worker's running jobs with their age."""

from __future__ import annotations

import re
from typing import Any

import pytest

from jsworker import App, Reject, Retry, current_job
from jsworker._lifecycle.lookup import RESERVED
from jsworker._lifecycle.state import JobState
from jsworker.admin import Admin
from jsworker.testing import NatsServer
from jsworker.ui import create_app
from jsworker.workflows import chain

from ..support import wait_until_async
from .ui_support import client, no_traceback
from .workers import Holding, in_process_worker

pytestmark = pytest.mark.anyio


def _events_app(url: str) -> App:
    app = App("dashev", url, events=True, workflows=True)
    app.queue("mail")

    @app.task(store_result=True)
    async def work(n: int) -> int:
        return n

    @app.task(queue="mail", max_retries=0)
    async def send(n: int) -> None:
        raise Reject(f"bounced {n}")

    @app.task(max_retries=2, store_result=True)
    async def flaky() -> str:
        if current_job().attempt == 1:
            raise Retry(0.05, reason="once more")
        return "ok"

    return app


async def test_the_charts_come_from_the_events_and_survive_a_restart(nats_server: NatsServer) -> None:
    app = _events_app(nats_server.url)
    async with in_process_worker(app) as _, Admin(app) as admin:
        await app.tasks["work"].adelay_many([(n,) for n in range(8)])
        await app.tasks["send"].adelay_many([(n,) for n in range(2)])
        await wait_until_async(
            lambda: admin.count_dead_letters(), until=lambda n: n == 2, timeout=20, message="two dead letters"
        )

        def charted(doc: dict[str, Any]) -> bool:
            series = doc["series"]
            started = sum(series.get("default", {}).get("started", []))
            failed = sum(series.get("mail", {}).get("failed", []))
            return bool(started > 0 and failed > 0)

        # Two dashboards one after the other, as a restarted process: each has the history
        # from its first reading, since it reads it from the events stream.
        for _ in range(2):
            async with client(create_app(app)) as http:
                page = await http.get("/")
                assert page.status_code == 200
                assert "from the job-events stream, the last 15 minutes in 30-second buckets" in page.text
                first = (await http.get("/live.json")).json()
                assert first["charts"]["source"] == "events" and first["charts"]["bucket"] == 30
                assert charted(first), first["series"]
                # A bucket a point: 15 minutes of 30 s, and the one filling now.
                assert len(first["series"]["default"]["started"]) in (30, 31)


async def test_the_charts_are_sampled_without_events(nats_server: NatsServer) -> None:
    app = App("dashnoev", nats_server.url)

    @app.task
    async def work() -> None: ...

    await app.provision()
    async with client(create_app(app)) as http:
        page = await http.get("/")
        assert "sampled every 2 seconds while this dashboard's process runs" in page.text
        assert (await http.get("/live.json")).json()["charts"]["source"] == "sampled"
        # No events stream, no events section on a job's page.
        job = await work.adelay()
        shown = await http.get(f"/jobs/{job.id}")
        assert shown.status_code == 200 and 'id="events"' not in shown.text
    await app.aclose()


async def test_a_jobs_page_shows_its_events_and_its_workflow(nats_server: NatsServer) -> None:
    app = _events_app(nats_server.url)
    work, flaky, send = app.tasks["work"], app.tasks["flaky"], app.tasks["send"]
    async with in_process_worker(app) as _, Admin(app) as admin, client(create_app(app)) as http:
        retried = await flaky.adelay()
        await wait_until_async(lambda: admin.job(retried.id), until=lambda s: s.state is JobState.SUCCEEDED)

        async def timeline_of(job_id: str, rows: int) -> str:
            async def page() -> str:
                response = await http.get(f"/jobs/{job_id}")
                no_traceback(response)
                assert response.status_code == 200
                return response.text

            def full(html: str) -> bool:
                body = html.split('id="timeline"', 1)[-1].split("</table>", 1)[0]
                return body.count("<tr>") == rows + 1  # the head's row too

            return await wait_until_async(page, until=full, timeout=20, message=f"{rows} events of {job_id}")

        html = await timeline_of(retried.id, 6)
        events = re.findall(r'class="badge event-([a-z_]+)"', html)
        assert events == ["enqueued", "started", "failed", "retried", "started", "succeeded"]
        assert (
            "once more" in html
            and "again in 50.0 ms" in html
            and "event(s) of <code>jsw.dashev.ev.default.flaky.*" in html
        )

        flow = await chain(work.s(1), send.s(), work.s()).aapply()
        await wait_until_async(
            lambda: admin.workflow(flow.id), until=lambda s: s.state == "failed", timeout=20
        )
        for step in (flow.id, f"{flow.id}-1"):
            shown = await http.get(f"/jobs/{step}")
            assert shown.status_code == 200, shown.text
            section = shown.text.split('id="workflow"', 1)[1].split('id="events"', 1)[0]
            assert flow.id in section and "chain" in section and "bounced 1" in section
            # Every enqueued step links to its page; the one that ended it is marked.
            assert f'href="/jobs/{flow.id}"' in section and f'href="/jobs/{flow.id}-1"' in section
            # The step after it never will be enqueued, and says so.
            assert section.count("ended it") == 1
            assert "never enqueued: the workflow failed before it" in section
            assert "not enqueued yet" not in section
        plain = await work.adelay(5)
        await wait_until_async(lambda: admin.job(plain.id), until=lambda s: s.state is JobState.SUCCEEDED)
        assert 'id="workflow"' not in (await http.get(f"/jobs/{plain.id}")).text


async def test_reserved_jobs_show_apart_from_running_ones_with_the_reason(nats_server: NatsServer) -> None:
    """A job in a worker's buffer, not started, is listed under reserved with why, and the
    workers page says it has not started and why."""
    holding = Holding(App("dashrsv", nats_server.url))
    app, hold = holding.app, holding.hold
    await app.provision()
    first, waiting = [await hold.adelay(n) for n in range(2)]
    await app.aclose()
    async with (
        in_process_worker(app, concurrency=1, max_messages=2) as _,
        Admin(app) as admin,
        client(create_app(app)) as http,
    ):
        await wait_until_async(lambda: holding.started == [0], timeout=10, message="one job to start")
        await wait_until_async(
            lambda: admin.jobs(state="reserved"), until=lambda p: len(p.items) == 1, timeout=10
        )
        reserved = (await http.get("/jobs", params={"state": "reserved"})).text
        row = reserved.split(f'href="/jobs/{waiting.id}"', 1)[1].split("</tr>", 1)[0]
        assert RESERVED in row
        assert first.id not in reserved
        running = (await http.get("/jobs", params={"state": "running"})).text
        assert first.id in running and waiting.id not in running
        workers = (await http.get("/workers")).text
        row = workers.split(f'data-job="{waiting.id}"', 1)[1].split("</tr>", 1)[0]
        assert f"not started: {RESERVED}" in row
        holding.gate.set()


async def test_the_workers_page_lists_each_workers_running_jobs_with_their_age(
    nats_server: NatsServer,
) -> None:
    holding = Holding(App("dashrun", nats_server.url))
    app, gate, started, hold = holding.app, holding.gate, holding.started, holding.hold

    await app.provision()
    held = [await hold.adelay(n) for n in range(2)]
    await app.aclose()
    async with in_process_worker(app) as _, Admin(app) as admin, client(create_app(app)) as http:
        await wait_until_async(lambda: len(started) == 2, timeout=10, message="two jobs to start")
        (worker,) = await wait_until_async(admin.workers, timeout=10, message="the worker's entry")
        page = await http.get("/workers")
        assert page.status_code == 200
        section = page.text.split('id="running"', 1)[1]
        assert f"On <code>{worker.id}</code> · 2" in section
        for job in held:
            row = section.split(f'data-job="{job.id}"', 1)[1].split("</tr>", 1)[0]
            assert f'href="/jobs/{job.id}"' in row and "hold" in row
            # Its age: seconds since its worker started it.
            assert re.search(r'<td class="num">\d+s</td>', row), row
        gate.set()
        await wait_until_async(lambda: admin.running_jobs(), until=lambda r: not r.workers, timeout=10)
        assert "No job is running." in (await http.get("/workers")).text
