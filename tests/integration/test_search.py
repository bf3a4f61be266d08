"""Searching jobs by text (``Admin.search``): the newest waiting jobs and dead letters, by part
of an id, an argument's value, a caller's header, a dead letter's reason or error; arguments
left out when payloads are not to be shown."""

from __future__ import annotations

import pytest

from jsworker import Admin, App
from jsworker.testing import NatsServer

from ..support import wait_until_async
from .workers import in_process_worker

pytestmark = pytest.mark.anyio


async def test_a_search_finds_jobs_by_what_they_hold(nats_server: NatsServer) -> None:
    app = App("finder", nats_server.url, partitions=2)

    @app.task
    async def ship(order: str) -> None: ...

    @app.task(queue="bills", max_retries=0)
    async def bill(order: str) -> None:
        raise ValueError(f"card declined for {order}")

    await app.provision()
    parcel = await ship.adelay("parcel-88231")
    tagged = await ship.aapply(("plain",), headers={"tenant": "acme-north"})
    await ship.adelay("other")
    failing = await bill.adelay("order-5")
    await app.aclose()
    async with in_process_worker(app, queues=["bills"]), Admin(app) as admin:
        await wait_until_async(
            lambda: admin.count_dead_letters(), until=lambda n: n == 1, timeout=10, message="the dead letter"
        )
        by_argument = await admin.search("PARCEL-882")
        assert [(m.place, m.job_id, m.matched) for m in by_argument.matches] == [
            ("waiting", parcel.id, "arguments")
        ]
        assert by_argument.waiting == 3 and by_argument.letters == 1
        assert [(m.job_id, m.matched) for m in (await admin.search("acme-north")).matches] == [
            (tagged.id, "header tenant")
        ]
        declined = (await admin.search("card declined")).matches
        assert [(m.place, m.job_id, m.queue, m.task, m.matched) for m in declined] == [
            ("dead letter", failing.id, "bills", "bill", "reason")
        ]
        assert [m.job_id for m in (await admin.search(parcel.id[:12])).matches] == [parcel.id]
        # Payloads off: an argument's value is not searched (it would show through).
        hidden = await admin.search("parcel-882", arguments=False)
        assert hidden.matches == () and not hidden.arguments
