"""Middleware and start/stop hooks on a real server: headers stamped on every kind of
enqueue and read by tasks, ``around_run`` nesting over async, sync and process tasks,
``on_settled`` for each way a delivery ends, hooks once per worker process."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jsworker import App
from jsworker.testing import NatsServer

from ..support import wait_until, wait_until_async
from .workers import APPS, in_process_worker, start_worker, stop, worker_env

sys.path.insert(0, str(APPS))
import middleware_app
from middleware_app import SEEN

pytestmark = pytest.mark.anyio


@pytest.fixture
def app(nats_server: NatsServer) -> Iterator[App]:
    middleware_app.app.configure_connection([nats_server.url])
    SEEN.clear()
    yield middleware_app.app
    middleware_app.app.close()


def seen(kind: str) -> list[tuple[str, ...]]:
    return [fields for fields in SEEN if fields[0] == kind]


async def test_every_enqueue_is_stamped_in_order_and_the_task_reads_the_stamps(app: App) -> None:
    stamps = middleware_app.stamps
    await app.provision()
    jobs = [
        await stamps.adelay(),
        await asyncio.to_thread(stamps.delay),
        *(await stamps.adelay_many([(), ()])),
        await stamps.aapply(countdown=0.5),
    ]
    await app.aclose()
    async with in_process_worker(app, queues=["default"]):
        results = [await job.aresult(timeout=30) for job in jobs]
    pool = seen("startup") and app.state.pool
    assert results[:4] == [{"X-Stamp-outer": "job", "X-Stamp-inner": "job", "pool": pool}] * 4
    assert results[4] == {"X-Stamp-outer": "delayed", "X-Stamp-inner": "delayed", "pool": pool}


def test_a_schedule_is_stamped_once_when_declared(app: App) -> None:
    app.schedule(middleware_app.stamps, name="stamped-ticks", every=3600)
    try:
        assert app.schedules["stamped-ticks"].headers == {
            "X-Stamp-outer": "schedule",
            "X-Stamp-inner": "schedule",
        }
    finally:
        del app.schedules["stamped-ticks"]


async def test_on_settled_hears_each_way_a_delivery_ends(app: App, tmp_path: Path) -> None:
    await app.provision()
    began = time.time()
    expiring = await middleware_app.plain.aapply(expires=0.05)
    # Past its expiry, with no worker to start it.
    await wait_until_async(lambda: time.time() > began + 0.05, timeout=5, message="its expiry")
    await app.aclose()
    started = tmp_path / "started"
    async with in_process_worker(app, queues=["default", "held"], grace=0.2) as worker:
        flaky = await middleware_app.flaky.adelay()
        refused = await middleware_app.refused.adelay()
        cancelled = await middleware_app.held.adelay(str(started))
        await wait_until_async(started.exists, timeout=10, message="the held job to start")
        assert await cancelled.acancel()
        handed = await middleware_app.held.adelay(str(tmp_path / "again"))
        await wait_until_async((tmp_path / "again").exists, timeout=10, message="the second to start")
        want = {
            (expiring.id, "expired"),
            (flaky.id, "retrying"),
            (flaky.id, "succeeded"),
            (refused.id, "failed"),
            (cancelled.id, "cancelled"),
        }
        await wait_until_async(
            lambda: {(f[1], f[2]) for f in seen("settled")} >= want, timeout=30, message="settled states"
        )
        worker.stop()
    # The worker stopped while the second held job ran: given back, for another worker.
    assert (handed.id, "handed_back") in {(f[1], f[2]) for f in seen("settled")}
    assert len(seen("settled")) == len(want) + 1  # once per delivery, nothing twice


def test_around_run_is_outer_inner_inner_outer_for_async_sync_and_process_tasks(
    app: App, nats_server: NatsServer, tmp_path: Path
) -> None:
    record, log = tmp_path / "record", tmp_path / "log"
    jobs = [middleware_app.stamps.delay(), middleware_app.sync_ok.delay(), middleware_app.in_process.delay()]
    proc = start_worker(nats_server.url, record, log, "-Q", "default", module="middleware_app")
    try:

        def order() -> dict[str, list[str]]:
            text = record.read_text() if record.exists() else ""
            out: dict[str, list[str]] = {job.id: [] for job in jobs}
            for line in text.splitlines():
                kind, *rest = line.split()
                if kind in ("enter", "leave") and rest[1] in out:
                    out[rest[1]].append(f"{kind} {rest[0]}")
            return out

        wait_until(
            order,
            until=lambda got: all(len(steps) == 4 for steps in got.values()),
            timeout=30,
            message="every job wrapped by both middlewares",
        )
        for steps in order().values():
            assert steps == ["enter outer", "enter inner", "leave inner", "leave outer"]
    finally:
        assert stop(proc) == 0, log.read_text()


def test_start_and_stop_hooks_run_once_in_each_process(nats_server: NatsServer, tmp_path: Path) -> None:
    record, log = tmp_path / "record", tmp_path / "log"
    proc = start_worker(nats_server.url, record, log, "--processes", "2", module="middleware_app")

    def hooks(kind: str) -> list[str]:
        text = record.read_text() if record.exists() else ""
        return [line.split()[-1] for line in text.splitlines() if line.startswith(kind)]

    wait_until(lambda: len(hooks("startup")) == 2, timeout=60, message="a start hook in each process")
    assert stop(proc, timeout=30) == 0, log.read_text()
    started = hooks("startup")
    assert len(set(started)) == 2  # two processes, once each
    assert sorted(hooks("shutdown")) == sorted(started)
    # The stop hook closed what the start hook of its own process opened.
    assert all(f"pool-{pid}" in line for pid in started for line in record.read_text().splitlines()
               if line.startswith("shutdown") and line.endswith(pid))  # fmt: skip


@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_failing_start_hook_stops_the_worker_with_exit_code_1(
    nats_server: NatsServer, processes: str
) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "jsworker", "run", "middleware_app", "--processes", processes],
        env={**worker_env(nats_server.url), "MW_FAIL_STARTUP": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 1, out.stderr
    assert "start hook" in out.stderr and "no database today" in out.stderr, out.stderr
    if processes == "2":
        # The fleet gives up as for an app that cannot be imported: no restart loop.
        assert len(re.findall(r"fleet\.process_started", out.stderr)) == 2
