"""A schedule made or changed from the dashboard (or ``Admin.put_schedule``): installed by the
workers for a dashboard (which may not write schedules), by the operator itself; it fires and
is kept; a schedule the code declares is changed in the code, not here."""

from __future__ import annotations

import pytest

from jsworker import Admin, App
from jsworker.testing import NatsServer
from jsworker.ui import create_app

from ..support import wait_until_async
from .ui_support import client, no_traceback, post
from .workers import in_process_worker

pytestmark = pytest.mark.anyio


async def test_a_schedule_is_made_and_changed_from_the_dashboard(nats_server: NatsServer) -> None:
    app = App("plans", nats_server.url)
    ran: list[int] = []

    @app.task
    async def tick(n: int) -> None:
        ran.append(n)

    app.schedule(tick, cron="0 3 * * *", args=(0,), name="nightly")
    await app.provision()
    await app.aclose()
    async with in_process_worker(app), client(create_app(app)) as http:
        made = await post(
            http,
            "/schedules/put",
            {"name": "often", "task": "tick", "every": "1", "args": "[7]"},
            page="/schedules",
        )
        assert made.status_code == 303
        await wait_until_async(lambda: 7 in ran, timeout=15, message="the new schedule to fire")
        page = (await http.get("/schedules")).text
        assert 'data-name="often"' in page and "not in code" in page
        form = (await http.get("/schedules?edit=often")).text
        assert "Change schedule often" in form and 'value="[7]"' in form
        changed = await post(
            http,
            "/schedules/put",
            {"name": "often", "task": "tick", "cron": "*/10 * * * *", "args": "[8]"},
            page="/schedules",
        )
        assert changed.status_code == 303
        async with Admin(app) as admin:
            (often,) = [s for s in await admin.schedules() if s.name == "often"]
            assert often.expression == "0 */10 * * * *"
            # The form shows it as it was written (five fields), not as the server fires it.
            assert 'value="*/10 * * * *"' in (await http.get("/schedules?edit=often")).text
            # The operator writes one itself.
            assert await admin.put_schedule("later", "tick", every=3600, args=[9]) == "created"
            assert await admin.put_schedule("later", "tick", every=3600, args=[9]) == "unchanged"
        for fields, said in (
            ({"name": "nightly", "task": "tick", "every": "5"}, "declared in the code"),
            ({"name": "bad", "task": "nope", "every": "5"}, "no task"),
            ({"name": "bad", "task": "tick", "every": "5", "args": "{"}, "args must be JSON"),
            ({"name": "bad", "task": "tick", "every": "5", "args": '["x", 1]'}, "not saved"),
        ):
            refused = await post(http, "/schedules/put", fields, page="/schedules")
            no_traceback(refused)
            assert refused.status_code == 400 and said in refused.text, (fields, refused.text[-600:])
