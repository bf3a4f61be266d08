"""A queue's limits changed at run time (``Admin.set_queue_limits``, the queue page's form):
the server applies ``max_running`` at once, running workers the rate limit, a deploy (a
worker's provisioning) keeps both, and ``declared`` puts back the code's."""

from __future__ import annotations

import asyncio
import time

import pytest

from jsworker import Admin, App, ConfigurationError, JsworkerError
from jsworker.admin import QueueStatus
from jsworker.admin._doctor import diagnose
from jsworker.testing import NatsServer
from jsworker.ui import create_app

from ..support import wait_until_async
from .ui_support import client, post
from .workers import in_process_worker

pytestmark = pytest.mark.anyio


def _status(statuses: list[QueueStatus], queue: str) -> QueueStatus:
    return next(s for s in statuses if s.queue == queue)


async def test_max_running_set_at_run_time_holds_at_once_and_after_a_deploy(
    nats_server: NatsServer,
) -> None:
    app = App("lim", nats_server.url)
    app.queue("capped", max_running=2)
    gate, running = asyncio.Event(), set[int]()

    @app.task(queue="capped")
    async def hold(i: int) -> None:
        running.add(i)
        await gate.wait()
        running.discard(i)

    async with in_process_worker(app, concurrency=10) as worker, Admin(app) as admin:
        await hold.adelay_many([(i,) for i in range(8)])
        await wait_until_async(lambda: len(running) == 2, timeout=10, message="the code's 2 running")
        assert await admin.set_queue_limits("capped", max_running=5) == {"max_running": "5"}
        # The server hands out three more at once: the worker had room for them all along.
        await wait_until_async(lambda: len(running) == 5, timeout=10, message="5 running")
        status = _status(await admin.queues(), "capped")
        assert status.max_running == 5 and status.overrides == {"max_running": "5"}
        # A deploy: provisioning from the code (max_running=2) keeps what was set at run time.
        await app.provision()
        status = _status(await admin.queues(), "capped")
        assert status.max_running == 5 and status.overrides == {"max_running": "5"}
        # The doctor says the server and the code differ, and why.
        told = [f.message for f in await diagnose(app, await admin.connection()) if f.check == "consumers"]
        assert told == [
            "queue capped: limits set at run time (max_running 5) stand in for the code's until "
            "they are set back to 'declared' (the queue's page, or Admin.set_queue_limits)"
        ]
        # Back to the code's.
        assert await admin.set_queue_limits("capped", max_running="declared") == {}
        status = _status(await admin.queues(), "capped")
        assert status.max_running == 2 and status.overrides == {}
        told = [f.level for f in await diagnose(app, await admin.connection()) if f.check == "consumers"]
        assert told == ["ok"]
        gate.set()
        await wait_until_async(lambda: worker.counts["succeeded"] == 8, timeout=10, message="all 8 done")


async def test_a_rate_limit_set_at_run_time_reaches_running_workers(nats_server: NatsServer) -> None:
    app = App("limrate", nats_server.url)
    app.queue("paced", rate_limit="2/s")
    started: list[float] = []

    @app.task(queue="paced")
    async def tick(i: int) -> None:
        started.append(time.monotonic())

    async with in_process_worker(app, concurrency=10, stats_interval=0.2), Admin(app) as admin:
        await tick.adelay_many([(i,) for i in range(400)])
        await wait_until_async(lambda: len(started) >= 2, timeout=10, message="the first starts")
        held = len(started)
        # Under 2/s, no more than a few start while the change is asked and reaches the worker.
        assert await admin.set_queue_limits("paced", rate_limit="none") == {"rate_limit": "none"}
        await wait_until_async(lambda: len(started) == 400, timeout=20, message="the rest without a limit")
        assert held < 10
        assert _status(await admin.queues(), "paced").overrides == {"rate_limit": "none"}
        # Set again (a limit of its own), then back to the code's: a running worker follows each.
        await tick.adelay_many([(i,) for i in range(400, 430)])
        assert await admin.set_queue_limits("paced", rate_limit="1/m") == {"rate_limit": "1/m"}
        assert await admin.set_queue_limits("paced", rate_limit="declared") == {}


async def test_limits_are_checked_and_need_a_running_worker(nats_server: NatsServer) -> None:
    app = App("limbad", nats_server.url)
    app.queue("spread", partitions=2)

    @app.task
    async def plain() -> None: ...

    @app.task(queue="spread")
    async def wide() -> None: ...

    await app.provision()
    async with Admin(app) as admin:
        for queue, limits, error in (
            ("nope", {"max_running": 3}, "declares no queue 'nope'"),
            ("default", {"max_running": -1}, "max_running is a whole number"),
            ("default", {"max_running": "3"}, "max_running is a whole number"),
            ("default", {"rate_limit": "fast"}, "rate_limit is 'N/s'"),
            ("spread", {"max_running": 3}, "spread over 2 partitions"),
            ("default", {}, "nothing to change"),
        ):
            with pytest.raises(ConfigurationError, match=error):
                await admin.set_queue_limits(queue, **limits)
        with pytest.raises(JsworkerError, match="no worker of app limbad is running"):
            await admin.set_queue_limits("default", max_running=3)
    await app.aclose()


async def test_the_queue_page_changes_the_limits(nats_server: NatsServer) -> None:
    app = App("limui", nats_server.url)
    app.queue("paced", rate_limit="5/s", max_running=3)

    @app.task(queue="paced")
    async def noop() -> None: ...

    async with in_process_worker(app), Admin(app) as admin, client(create_app(app)) as http:
        page = (await http.get("/queues/paced")).text
        assert 'id="queue-limits"' in page and 'value="5/s"' in page and 'value="3"' in page
        done = await post(
            http, "/queues/paced/limits", {"max_running": "7", "rate_limit": "20/m"}, page="/queues/paced"
        )
        assert done.status_code == 303
        status = _status(await admin.queues(), "paced")
        assert status.max_running == 7 and status.overrides == {"max_running": "7", "rate_limit": "20/m"}
        page = (await http.get("/queues/paced")).text
        assert "set at run time" in page and "the code says max running 3, rate limit 5/s" in page
        refused = await post(http, "/queues/paced/limits", {"rate_limit": "lots"}, page="/queues/paced")
        assert refused.status_code == 400 and "rate_limit is" in refused.text
        done = await post(http, "/queues/paced/limits", {"declared": "1"}, page="/queues/paced")
        assert done.status_code == 303
        assert _status(await admin.queues(), "paced").overrides == {}
