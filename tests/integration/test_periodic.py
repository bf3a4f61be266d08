"""Periodic schedules on a real nats-server: installed once however many processes reconcile
at the same time, left alone when unchanged, replaced when changed, paused, resumed, triggered
and removed from Python and from the command line."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import pytest
from prometheus_client import REGISTRY

from jsworker import App, ConfigurationError, current_job
from jsworker._runtime import upkeep
from jsworker._scheduling.admin import Schedules
from jsworker._scheduling.periodic import ScheduleNotFound, read_schedules, sync_schedules
from jsworker.jetstream.connection import Connection
from jsworker.testing import NatsServer
from jsworker.ui import create_app

from ..support import stream_messages_async, wait_until_async
from .ui_support import client
from .workers import APPS, cli, in_process_worker

sys.path.insert(0, str(APPS))
import periodic_app

pytestmark = pytest.mark.anyio


def _app(url: str, every: float = 60, names: tuple[str, ...] = ("a", "b", "c")) -> tuple[App, list[str]]:
    app = App("beat", url)
    ran: list[str] = []

    @app.task
    async def tick(label: str) -> None:
        ran.append(f"{label} {current_job().id}")

    for name in names:
        app.schedule(tick, every=every, name=name, args=(name,))
    return app, ran


async def test_processes_reconciling_at_once_leave_one_schedule_each(nats_server: NatsServer) -> None:
    apps = [_app(nats_server.url)[0] for _ in range(6)]
    conns = [await Connection.open(a.connect_options("worker")) for a in apps]
    try:
        await apps[0].provision_streams(conns[0])
        reports = await asyncio.gather(*(sync_schedules(a, c) for a, c in zip(apps, conns, strict=True)))
        created = sorted(n for r in reports for n in r.created + r.updated)
        assert created == ["a", "b", "c"]  # each written by exactly one process, the others found it done
        assert await stream_messages_async(nats_server.url, "JSW_BEAT_SCHED") == 3
        before = await read_schedules(apps[0], conns[0])
        again = await sync_schedules(apps[1], conns[1])
        assert again.unchanged == ["a", "b", "c"] and not again.created and not again.updated
        assert {n: s.seq for n, s in (await read_schedules(apps[0], conns[0])).items()} == {
            n: s.seq for n, s in before.items()
        }  # identical schedules are not rewritten: their timing is undisturbed
    finally:
        for conn in conns:
            await conn.close()


async def test_a_changed_schedule_is_replaced_and_keeps_being_paused(nats_server: NatsServer) -> None:
    old, _ = _app(nats_server.url, every=60)
    async with Schedules(old) as schedules:
        assert (await schedules.sync()).created == ["a", "b", "c"]
        assert await schedules.pause("b") is True
        assert await schedules.pause("b") is False
    new, _ = _app(nats_server.url, every=30)
    async with Schedules(new) as schedules:
        report = await schedules.sync()
        assert report.updated == ["a", "b", "c"]
        listed = {s.name: s for s in await schedules.list()}
        assert {s.expression for s in listed.values()} == {"@every 30s"}
        assert listed["b"].paused and not listed["a"].paused
        assert listed["b"].next_run() is None and listed["a"].next_run() is not None
        assert await schedules.resume("b") is True
        assert not {s.name: s for s in await schedules.list()}["b"].paused
        with pytest.raises(ScheduleNotFound):
            await schedules.pause("nope")


@pytest.mark.slow
async def test_ticks_fire_jobs_with_tick_ids_and_pausing_stops_them(nats_server: NatsServer) -> None:
    app, ran = _app(nats_server.url, every=1, names=("fast",))
    async with in_process_worker(app):
        await wait_until_async(lambda: len(ran) >= 2, timeout=15, message="two ticks")
        ids = [line.split()[1] for line in ran]
        assert all(i.startswith("fast-") and i.endswith("Z") for i in ids) and len(set(ids)) == len(ids)
        async with Schedules(app) as schedules:
            assert await schedules.pause("fast")
            # A tick in flight as the pause lands may still arrive; after that, none.
            paused_at = time.time()
            await wait_until_async(lambda: time.time() - paused_at > 1.5, timeout=5, message="a tick's time")
            count = len(ran)
            await wait_until_async(
                lambda: time.time() - paused_at > 3.5, timeout=5, message="two ticks' time"
            )
            assert len(ran) == count, "a paused schedule fired"
            job = await schedules.trigger("fast")
            assert job.id.startswith("fast-manual-")
            await wait_until_async(lambda: any(job.id in line for line in ran), timeout=10, message="trigger")
            assert await schedules.resume("fast")
            await wait_until_async(lambda: len(ran) >= count + 2, timeout=10, message="ticks after resume")


async def test_stale_schedules_are_kept_by_workers_and_pruned_on_request(nats_server: NatsServer) -> None:
    both, _ = _app(nats_server.url, names=("kept", "gone"))
    async with Schedules(both) as schedules:
        await both.provision_streams(await schedules.connection())
        await schedules.sync()
    only, _ = _app(nats_server.url, names=("kept",))
    async with in_process_worker(only):
        pass  # a worker's own reconcile never removes what other code declared
    async with Schedules(only) as schedules:
        assert [(s.name, s.declared) for s in await schedules.list()] == [("gone", False), ("kept", True)]
        report = await schedules.sync(prune=True)
        assert report.stale == ["gone"] and report.removed == ["gone"]
        assert [s.name for s in await schedules.list()] == ["kept"]
        assert await schedules.remove("kept") is True
        assert await schedules.remove("kept") is False


async def test_a_worker_started_without_schedules_installs_none(nats_server: NatsServer) -> None:
    app, _ = _app(nats_server.url)
    async with in_process_worker(app, schedules=False):
        pass
    async with Schedules(app) as schedules:
        assert await schedules.list() == []


@pytest.mark.slow
def test_the_command_line_operates_schedules_and_cancels_delayed_jobs(nats_server: NatsServer) -> None:
    url = nats_server.url
    assert cli(url, "schedules", "list", "periodic_app").stdout.strip() == "no schedules"
    synced = cli(url, "schedules", "sync", "periodic_app")
    assert synced.returncode == 0, synced.stderr
    assert synced.stdout.strip() == "created: morning_report, ping-db"
    listed = cli(url, "schedules", "list", "periodic_app").stdout.splitlines()
    assert listed[0].split() == ["NAME", "TASK", "EXPRESSION", "ZONE", "NEXT", "RUN", "PAUSED"]
    rows = {line.split()[0]: line.split() for line in listed[1:]}
    # As declared (cron="0 7 * * *"), not as the server fires it (six fields, seconds first).
    assert rows["morning_report"][2:8] == ["0", "7", "*", "*", "*", "Europe/Berlin"]
    assert rows["ping-db"][1:4] == ["ping", "@every", "300s"]
    assert cli(url, "schedules", "pause", "periodic_app", "ping-db").stdout.strip() == "ping-db: paused"
    assert (
        cli(url, "schedules", "pause", "periodic_app", "ping-db").stdout.strip()
        == "ping-db: was already paused"
    )
    assert cli(url, "schedules", "resume", "periodic_app", "ping-db").stdout.strip() == "ping-db: resumed"
    triggered = cli(url, "schedules", "trigger", "periodic_app", "ping-db")
    assert triggered.returncode == 0 and triggered.stdout.startswith("ping-db-manual-")
    marked = cli(url, "schedules", "mark-unique", "periodic_app", "--dry-run")
    assert marked.returncode == 0 and marked.stdout.strip() == "0 unique delayed job(s) lack a marker"
    unknown = cli(url, "schedules", "pause", "periodic_app", "nope")
    assert unknown.returncode == 2 and "no schedule named 'nope'" in unknown.stderr
    assert cli(url, "schedules", "remove", "periodic_app", "ping-db").returncode == 0
    assert cli(url, "schedules", "remove", "periodic_app", "ping-db").returncode == 2
    nothing = cli(url, "jobs", "cancel", "periodic_app", "no-such-job")
    assert nothing.returncode == 2 and "nothing to cancel" in nothing.stderr

    periodic_app.app.servers = [url]
    try:
        job = periodic_app.ping.apply(("db",), countdown=600)
    finally:
        periodic_app.app.close()
    cancelled = cli(url, "jobs", "cancel", "periodic_app", job.id)
    assert cancelled.returncode == 0 and cancelled.stdout.strip() == f"{job.id}: cancelled"
    as_json: Any = cli(url, "schedules", "list", "periodic_app", "--json").stdout.splitlines()
    assert len(as_json) == 1 and '"name": "morning_report"' in as_json[0]


@pytest.mark.parametrize(("declared", "lasting"), [("task", 2.0), ("default", 1.0)])
@pytest.mark.slow
async def test_ticks_that_waited_past_their_expiry_do_not_run(
    nats_server: NatsServer, declared: str, lasting: float
) -> None:
    """Ticks fired every second while no worker runs pile up in the queue; once a worker
    starts, those not started within their expiry are expired, not run in a burst: ``task``:
    the task's ``expires=2``; ``default``: a tick expires once the next one is due."""
    app = App("late", nats_server.url)
    ran: list[float] = []

    @app.task(expires=2.0 if declared == "task" else None)
    async def beat() -> None:
        due = current_job().scheduled_for
        assert due is not None
        ran.append(time.time() - due.timestamp())

    app.schedule(beat, every=1)
    async with Schedules(app) as schedules:
        await app.provision()
        await schedules.sync()
    await wait_until_async(
        lambda: stream_messages_async(nats_server.url, "JSW_LATE_SCHED"),
        until=lambda n: n >= 7,  # the schedule and six ticks waiting
        timeout=20,
        message="six ticks waiting",
    )
    await app.aclose()
    async with in_process_worker(app) as worker:
        await wait_until_async(
            lambda: worker.counts["expired"], until=lambda n: n >= 4, timeout=20, message="late ticks expired"
        )
        await wait_until_async(lambda: ran, timeout=20, message="a tick to run")
    # Whatever ran had not waited past its expiry when it started.
    assert ran and all(waited <= lasting + 0.5 for waited in ran), ran


@pytest.mark.slow
async def test_a_unique_task_s_ticks_and_triggers_respect_its_key(nats_server: NatsServer) -> None:
    """While a tick of a unique task runs, an enqueue of the same key and a trigger of its
    schedule are duplicates naming it, and the ticks that fire meanwhile are dropped, not run
    alongside; once it is done the next tick runs."""
    app = App("solo", nats_server.url)
    gate = asyncio.Event()
    runs: list[str] = []

    @app.task(unique=True)
    async def sweep(region: str) -> None:
        runs.append(current_job().id)
        await gate.wait()

    app.schedule(sweep, every=1, args=("eu",), expires="never")
    async with in_process_worker(app) as worker:
        await wait_until_async(lambda: runs, timeout=15, message="a tick to run")
        key = runs[0]
        assert key.startswith("sweep-u")  # the key's id, not the tick's
        again = await sweep.adelay("eu")
        assert again.duplicate and again.id == key
        async with Schedules(app) as schedules:
            triggered = await schedules.trigger("sweep")
        assert triggered.duplicate and triggered.id == key

        def dropped() -> float:
            sample = app.metrics.registry.get_sample_value(
                "jsworker_fired_dropped_total", {"queue": "default", "task": "sweep", "reason": "held"}
            )
            return sample or 0.0

        await wait_until_async(dropped, until=lambda n: n >= 2, timeout=15, message="two ticks dropped")
        assert runs == [key] and worker.counts["skipped"] >= 2
        gate.set()
        await wait_until_async(lambda: len(runs) >= 2, timeout=15, message="the next tick to run")


async def test_a_schedule_switched_off_in_code_is_paused_and_older_code_keeps_it_paused(
    nats_server: NatsServer,
) -> None:
    """Rolling deploy: the old code runs schedule ``a``; the new code declares it
    ``enabled=False`` and a worker starting with it pauses it; an old worker starting after
    that (a restart during the deploy) leaves it paused. Headers declared on a schedule ride
    on its ticks."""
    old, _ = _app(nats_server.url, every=60, names=("a",))
    async with Schedules(old) as schedules:
        assert (await schedules.sync()).created == ["a"]

    new = App("beat", nats_server.url)
    seen: list[dict[str, str]] = []

    @new.task
    async def tick(label: str) -> None:
        seen.append(dict(current_job().headers))

    new.schedule(tick, every=60, name="a", args=("a",), enabled=False)
    new.schedule(tick, every=1, name="tagged", args=("t",), headers={"X-Team": "ops"})
    async with Schedules(new) as schedules:
        await schedules.sync()
        listed = {s.name: s.paused for s in await schedules.list()}
    assert listed == {"a": True, "tagged": False}
    async with Schedules(old) as schedules:
        await schedules.sync()  # the old code starts again: "a" differs from it, but stays paused
        assert {s.name: s.paused for s in await schedules.list()}["a"] is True
    async with in_process_worker(new, schedules=False):
        await wait_until_async(lambda: seen, timeout=15, message="a tagged tick")
    assert seen[0]["X-Team"] == "ops"
    with pytest.raises(ConfigurationError, match="reserved"):
        new.schedule(tick, every=60, name="bad", args=("b",), headers={"Jsw-Task": "x"})


@pytest.mark.slow
async def test_a_planted_schedule_that_cannot_be_read_is_listed_as_malformed(nats_server: NatsServer) -> None:
    """Periodic-schedule messages written by hand with an expression or zone jsworker cannot
    read: the command and the dashboard list them as malformed, with no next run, and the
    schedule jsworker wrote beside them as before."""
    url = nats_server.url
    assert cli(url, "schedules", "sync", "periodic_app").returncode == 0
    planted = {
        "bad-every": ("@every soon", None),
        "zero-every": ("@every 0s", None),
        "bad-cron": ("61 * * * * *", None),
        "bad-zone": ("0 0 7 * * *", "Mars/Olympus"),
    }
    app = App("cadence", url)
    conn = await Connection.open(app.connect_options("operator", "plant"))
    try:
        for name, (spec, tz) in planted.items():
            headers = {"Jsw-Task": "ping", "Jsw-Queue": "default", "Jsw-Schedule-Spec": spec}
            if tz is not None:
                headers["Jsw-Schedule-Zone"] = tz
            await conn.js.publish(f"jsw.cadence.sched.repeat.{name}", b"{}", headers=headers)
    finally:
        await conn.close()
    listed = await asyncio.to_thread(cli, url, "schedules", "list", "periodic_app")
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
    for name in planted:
        assert "(malformed)" in rows[name] and rows[name].split()[-2] == "-", rows[name]
    assert "(malformed)" not in rows["ping-db"]
    as_json = await asyncio.to_thread(cli, url, "schedules", "list", "periodic_app", "--json")
    malformed = {s["name"]: s["malformed"] for s in map(json.loads, as_json.stdout.splitlines())}
    assert set(planted) == {name for name, why in malformed.items() if why}
    async with client(create_app(app)) as http:
        page = await http.get("/schedules")
        assert page.status_code == 200 and page.text.count(">malformed</span>") == len(planted)
    await app.aclose()


async def test_a_schedule_gone_from_the_server_is_put_back_and_another_version_is_left(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a worker runs, a declared schedule removed from the server comes back within the
    check's interval, counted; one that another version of the code rewrote (as in a rolling
    deploy) is left as that version wrote it."""
    monkeypatch.setattr(upkeep, "SCHEDULES_INTERVAL", 0.2)
    app, _ = _app(nats_server.url, names=("kept", "other"))

    def restored() -> float:
        return REGISTRY.get_sample_value("jsworker_schedules_restored_total", {"schedule": "kept"}) or 0.0

    async def put_back(schedules: Schedules) -> None:
        before = restored()
        assert await schedules.remove("kept")
        await wait_until_async(
            schedules.list, until=lambda found: "kept" in {s.name for s in found}, timeout=10
        )
        await wait_until_async(restored, until=lambda n: n == before + 1, timeout=5, message="counted")

    newer, _ = _app(nats_server.url, every=30, names=("other",))
    async with in_process_worker(app), Schedules(app) as schedules:
        await put_back(schedules)
        # Another version of the code declares "other" with another cadence, and installs it.
        assert (await sync_schedules(newer, await schedules.connection())).updated == ["other"]
        rewritten = {s.name: s for s in await schedules.list()}["other"]
        # A check that puts "kept" back has looked at "other" too.
        await put_back(schedules)
        assert {s.name: s for s in await schedules.list()}["other"].seq == rewritten.seq
    await newer.aclose()
