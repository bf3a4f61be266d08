"""Jobs that succeeded, were cancelled or expired, listed and counted from the job events
(``Admin.jobs`` with those states, and the dashboard's tabs for them)."""

from __future__ import annotations

import pytest

from jsworker import Admin, App, EventsNotFound
from jsworker._core.job_status import JobState
from jsworker.testing import NatsServer
from jsworker.ui import create_app

from ..support import wait_until_async
from .ui_support import client
from .workers import in_process_worker

pytestmark = pytest.mark.anyio


def _app(url: str, events: bool = True) -> App:
    app = App("ended", url, events=events)

    @app.task
    async def pack(n: int) -> int:
        return n

    @app.task(queue="slow")
    async def ship(n: int) -> None: ...

    return app


async def test_ended_jobs_are_listed_and_counted_from_their_events(nats_server: NatsServer) -> None:
    app = _app(nats_server.url)
    pack, ship = app.tasks["pack"], app.tasks["ship"]
    await app.provision()
    packed = [await pack.adelay(n) for n in range(5)]
    dropped = await ship.adelay(1)
    late = await ship.aapply((2,), expires=0.001)
    assert await app.acancel(dropped.id)
    await app.aclose()
    async with in_process_worker(app):
        async with Admin(app) as admin:
            await wait_until_async(
                lambda: admin.ended_counts(),
                until=lambda c: c == {"succeeded": 5, "cancelled": 1, "expired": 1},
                timeout=15,
                message="the jobs to end",
            )
            assert await admin.ended_counts(task="pack") == {"succeeded": 5, "cancelled": 0, "expired": 0}
            first = await admin.jobs(state="succeeded", limit=3)
            assert [j.id for j in first.items] == [j.id for j in packed[:3]]
            assert all(j.state is JobState.SUCCEEDED and j.worker and j.finished_at for j in first.items)
            rest = await admin.jobs(state="succeeded", limit=3, after=first.next_after)
            assert [j.id for j in rest.items] == [j.id for j in packed[3:]] and rest.next_after is None
            newest = await admin.jobs(state="succeeded", limit=2, newest_first=True)
            assert [j.id for j in newest.items] == [packed[4].id, packed[3].id]
            cancelled = (await admin.jobs(state="cancelled")).items
            assert [(j.id, j.queue, j.task) for j in cancelled] == [(dropped.id, "slow", "ship")]
            expired = (await admin.jobs(state="expired", queue="slow")).items
            assert [j.id for j in expired] == [late.id] and expired[0].reason
            assert (await admin.jobs(state="expired", queue="default")).items == ()
        async with client(create_app(app)) as http:
            page = (await http.get("/jobs?state=succeeded")).text
            assert all(j.id in page for j in packed)
            assert '<span class="count">5</span>' in page and "Ended" in page


async def test_without_job_events_the_page_says_where_they_would_come_from(nats_server: NatsServer) -> None:
    app = _app(nats_server.url, events=False)
    await app.provision()
    async with Admin(app) as admin:
        with pytest.raises(EventsNotFound, match="App\\(events=True\\)"):
            await admin.jobs(state="succeeded")
        assert await admin.ended_counts() == {}
    async with client(create_app(app)) as http:
        response = await http.get("/jobs?state=cancelled")
        assert response.status_code == 200 and 'id="no-events"' in response.text
    await app.aclose()
