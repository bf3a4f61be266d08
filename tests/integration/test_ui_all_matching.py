"""Every job a listing matches, across its pages (``/jobs/all``): asked first, then cancelled
beside the request; nothing outside the filters is touched, and a verb is refused for a state
it does not fit."""

from __future__ import annotations

import pytest

from jsworker import Admin, App
from jsworker.testing import NatsServer
from jsworker.ui import create_app

from ..support import wait_until_async
from .ui_support import client, no_traceback, post
from .workers import in_process_worker

pytestmark = pytest.mark.anyio


async def test_every_matching_job_is_cancelled_across_pages(nats_server: NatsServer) -> None:
    app = App("allmatch", nats_server.url)

    @app.task
    async def pack(n: int) -> None: ...

    @app.task
    async def ship(n: int) -> None: ...

    @app.task(queue="other")
    async def idle() -> None:
        """The worker's queue: it answers the dashboard's cancels and runs none of the jobs."""

    await app.provision()
    packs = [await pack.adelay(n) for n in range(120)]
    ships = [await ship.adelay(n) for n in range(5)]
    await app.aclose()
    async with in_process_worker(app, queues=["other"]), client(create_app(app)) as http:
        listing = (await http.get("/jobs?state=queued&task=pack&limit=50")).text
        assert "Cancel every matching job" in listing
        asked = await http.get("/jobs/all?verb=cancel&state=queued&task=pack")
        assert (
            asked.status_code == 200
            and "every queued job" in asked.text
            and "of task <b>pack</b>" in asked.text
        )
        mistyped = await post(
            http, "/jobs/all", {"verb": "cancel", "state": "queued", "task": "pack", "confirm": "yes"}
        )
        assert mistyped.status_code == 303 and "/jobs/all?" in mistyped.headers["location"]
        started = await post(
            http, "/jobs/all", {"verb": "cancel", "state": "queued", "task": "pack", "confirm": "cancel"}
        )
        assert started.status_code == 303
        async with Admin(app) as admin:
            await wait_until_async(
                lambda: admin.jobs(state="queued", task="pack"),
                until=lambda page: not page.items,
                timeout=20,
                message="every pack job cancelled",
            )
            left = await admin.jobs(state="queued", limit=500)
            assert sorted(j.id for j in left.items) == sorted(j.id for j in ships)
            assert (await admin.job(packs[-1].id)).state.value == "cancelled"
        # A run now applies to retrying jobs only; a state it does not fit is refused.
        refused = await http.get("/jobs/all?verb=retry&state=queued")
        no_traceback(refused)
        assert refused.status_code == 400 and "retry applies to jobs retrying" in refused.text
