"""Quieting and stopping one worker by its id (``Admin.quiet_worker``, ``Admin.stop_worker``,
the dashboard's workers page): a quiet worker finishes what runs, gives back what it pulled,
takes nothing new and says so in the registry; a stopped one stops."""

from __future__ import annotations

import asyncio

import pytest

from jsworker import Admin, App, ConfigurationError, JsworkerError
from jsworker.testing import NatsServer
from jsworker.ui import create_app

from ..support import wait_until_async
from .ui_support import client, post
from .workers import in_process_worker

pytestmark = pytest.mark.anyio


async def test_a_quiet_worker_finishes_what_runs_and_takes_nothing_new(nats_server: NatsServer) -> None:
    app = App("hush", nats_server.url)
    gate, started = asyncio.Event(), list[int]()

    @app.task
    async def hold(i: int) -> None:
        started.append(i)
        await gate.wait()

    await app.provision()
    await app.aclose()
    async with in_process_worker(app, concurrency=1) as worker, Admin(app) as admin:
        await hold.adelay(0)
        await wait_until_async(lambda: started, timeout=10, message="the first job to start")
        for i in range(1, 6):
            await hold.adelay(i)
        (entry,) = await admin.workers()
        assert entry.quiet_since is None
        assert await admin.quiet_worker(entry.id)
        assert not await admin.quiet_worker(entry.id)  # quiet already
        await wait_until_async(
            admin.workers, until=lambda found: found[0].quiet_since is not None, timeout=10, message="quiet"
        )
        gate.set()
        await wait_until_async(
            lambda: worker.counts["succeeded"] == 1 and worker.in_flight == 0,
            timeout=10,
            message="the running job to finish",
        )
        assert started == [0]  # a worker still taking jobs would have started the next one
        with pytest.raises(ConfigurationError, match="invalid worker id"):
            await admin.quiet_worker("no.such")
        with pytest.raises(JsworkerError, match="quiet worker nobody"):
            await admin.quiet_worker("nobody")
        # What it had pulled went back at once: another worker runs every other job well
        # before an ack wait would have given it back, while the quiet one is still up.
        async with in_process_worker(app):
            await wait_until_async(lambda: len(started) == 6, timeout=10, message="the others to run")
        assert await admin.stop_worker(entry.id)
        # Stopped cleanly, it took itself out of the registry.
        await wait_until_async(
            admin.workers,
            until=lambda found: entry.id not in {w.id for w in found},
            timeout=15,
            message="it to stop",
        )


async def test_the_workers_page_quiets_a_worker(nats_server: NatsServer) -> None:
    app = App("hushui", nats_server.url)

    @app.task
    async def noop() -> None: ...

    await app.provision()
    await app.aclose()
    async with in_process_worker(app), Admin(app) as admin:
        (entry,) = await admin.workers()
        async with client(create_app(app)) as http:
            page = (await http.get("/workers")).text
            assert 'id="worker-control"' in page and f'<option value="{entry.id}">' in page
            done = await post(http, "/workers/quiet", {"worker": entry.id}, page="/workers")
            assert done.status_code == 303
            await wait_until_async(
                lambda: http.get("/workers"),
                until=lambda r: '<td data-field="state">quiet</td>' in r.text,
                timeout=10,
                message="the page to say quiet",
            )
