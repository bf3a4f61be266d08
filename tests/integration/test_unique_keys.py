"""A unique enqueue is one publish: the server's check of it covers every form in which a job
holds its key (queued or running, delayed, a schedule's marker), so nothing is looked up first.
Markers come and go with their schedules; those left behind are swept, and schedules made
before markers existed are marked once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from nats.aio.msg import Msg

from jsworker import Admin, App, current_job
from jsworker._scheduling.delayed import due_ms, later_message, schedule_message
from jsworker._scheduling.markers import MarkerSweep, marker_message
from jsworker._wire.headers import UNIQUE
from jsworker.admin._doctor import diagnose
from jsworker.jetstream.connection import Connection
from jsworker.testing import NatsServer

from ..support import connected, wait_until_async
from .workers import in_process_worker

pytestmark = pytest.mark.anyio


def _app(url: str, name: str, ran: list[str]) -> App:
    app = App(name, url)

    @app.task(unique=True)
    async def once(key: str) -> None:
        ran.append(current_job().id)

    return app


async def _subjects(url: str, stream: str) -> dict[str, int]:
    """The subjects ``stream`` holds messages on, with their counts."""
    async with connected(url) as nc:
        info = await nc.jetstream().stream_info(stream, subjects_filter=">")
        return dict(info.state.subjects or {})


def _marks(subjects: dict[str, int]) -> list[str]:
    return [s for s in subjects if ".mark." in s]


async def _marked(url: str, stream: str) -> None:
    """Wait until a worker has made the delayed job in ``stream`` a schedule and marked its key."""
    await wait_until_async(
        lambda: _subjects(url, stream),
        until=lambda s: _marks(s) and not any(".later." in x for x in s),
        timeout=10,
        message="the delayed job made a schedule, its key marked",
    )


async def test_a_unique_enqueue_sends_its_job_and_asks_nothing_first(nats_server: NatsServer) -> None:
    """No stream read and no question to the workers comes before a unique job's publish: the
    server's check of the publish is the whole lookup. A second enqueue of the key is still
    a duplicate naming the first."""
    ran: list[str] = []
    app = _app(nats_server.url, "uqone", ran)
    once = app.tasks["once"]
    await app.provision()
    await once.adelay("warm")  # the connection is open and the stream known
    seen: list[str] = []
    async with connected(nats_server.url) as nc:

        async def note(msg: Msg) -> None:
            seen.append(msg.subject)

        for subjects in ("$JS.API.>", "jsw.uqone.ask.>", "jsw.uqone.held.>"):
            await nc.subscribe(subjects, cb=note)
        await nc.flush()
        first = await once.adelay("k")
        # Anything the enqueue sent before reached the server before this does.
        await nc.publish("jsw.uqone.ask.end.x", b"")
        await wait_until_async(lambda: "jsw.uqone.ask.end.x" in seen, timeout=5, message="the marker message")
        assert seen == ["jsw.uqone.ask.end.x"]
    again = await once.adelay("k")
    assert not first.duplicate and again.duplicate and again.id == first.id and again.seq == first.seq
    await app.aclose()
    # The markers' subjects are in the job stream.
    async with connected(nats_server.url) as nc:
        info = await nc.jetstream().stream_info("JSW_UQONE")
    assert "jsw.uqone.mark.>" in (info.config.subjects or [])


async def test_a_scheduled_unique_job_holds_its_key_until_it_is_queued(nats_server: NatsServer) -> None:
    """Delayed, then a schedule with its marker, then fired into its queue: a second enqueue
    of the key (immediate or delayed) is a duplicate naming it in every form; once it has run
    its marker is gone and the key is free."""
    url, ran = nats_server.url, list[str]()
    app = _app(url, "uqsched", ran)
    once = app.tasks["once"]
    await app.provision()
    later = await once.aapply(("k",), countdown=5)
    assert (await once.adelay("k")).duplicate  # not yet a schedule: its own message holds it
    await app.aclose()  # the worker's connection takes over this loop's enqueues
    async with in_process_worker(app):
        await _marked(url, "JSW_UQSCHED")
        again = await once.adelay("k")
        assert again.duplicate and again.id == later.id and again.scheduled_for == later.scheduled_for
        assert (await once.aapply(("k",), countdown=60)).duplicate
        await wait_until_async(lambda: ran, timeout=15, message="the job to fire and run")
        await wait_until_async(
            lambda: _subjects(url, "JSW_UQSCHED"), until=lambda s: not s, timeout=10, message="no marker"
        )
        fresh = await once.adelay("k")
        assert not fresh.duplicate
        await wait_until_async(lambda: len(ran) == 2, timeout=10, message="the key's next job to run")
    assert ran == [later.id, later.id]


async def test_a_cancelled_scheduled_unique_job_frees_its_key(nats_server: NatsServer) -> None:
    url, ran = nats_server.url, list[str]()
    app = _app(url, "uqcancel", ran)
    once = app.tasks["once"]
    await app.provision()
    later = await once.aapply(("k",), countdown=60)
    await app.aclose()
    async with in_process_worker(app):
        await _marked(url, "JSW_UQCANCEL")
        assert await app.acancel(later.id)
        assert _marks(await _subjects(url, "JSW_UQCANCEL")) == []
        fresh = await once.adelay("k")
        assert not fresh.duplicate
        await wait_until_async(lambda: ran, timeout=10, message="the key's new job to run")


async def test_markers_left_behind_are_swept_and_earlier_schedules_marked(nats_server: NatsServer) -> None:
    """A schedule made by an earlier version (no marker, no word that it is unique) is counted
    by the dry run and marked once; then an immediate enqueue of its key is its duplicate. A
    marker nothing else holds the key of (a worker stopped half way through a cancel) is
    swept; one whose schedule waits is kept."""
    url, ran = nats_server.url, list[str]()
    app = _app(url, "uqold", ran)
    once = app.tasks["once"]
    await app.provision()
    ns = app.namespace
    # What an earlier version's worker made of a delayed unique job: its schedule alone.
    job = app.producer.message(once, once.make_call(("old",), {}, None))
    when = datetime.now(UTC) + timedelta(seconds=60)
    delayed = later_message(ns, "default", job, when)
    due = due_ms(when)
    schedule = schedule_message(ns, delayed.subject, delayed.body, delayed.headers)
    headers = {k: v for k, v in schedule.headers.items() if k != UNIQUE}
    conn = await Connection.open(app.connect_options("operator"))
    try:
        await conn.nc.jetstream().publish(schedule.subject, schedule.body, headers=headers)
        # A marker with nothing behind it.
        orphan = marker_message(ns, "default", "once", "once-ugone", due)
        await conn.nc.jetstream().publish(orphan.subject, orphan.body, headers=dict(orphan.headers))
        unique = [f for f in await diagnose(app, conn) if f.check == "unique"]
        assert [f.level for f in unique] == ["problem"] and "mark-unique" in unique[0].message
        async with Admin(app) as admin:
            assert await admin.mark_unique_schedules(dry_run=True) == 1
            assert await admin.mark_unique_schedules() == 1
            assert await admin.mark_unique_schedules(dry_run=True) == 0
        assert [f.level for f in await diagnose(app, conn) if f.check == "unique"] == ["ok"]
        held = await once.adelay("old")
        assert held.duplicate and held.id == job.headers["Jsw-Job-Id"]
        assert len(_marks(await _subjects(url, "JSW_UQOLD"))) == 2
        assert await MarkerSweep(app, conn).sweep(age=0) == 1
        assert _marks(await _subjects(url, "JSW_UQOLD")) == [ns.mark_subject("default", "once", held.id)]
    finally:
        await conn.close()
    await app.aclose()
