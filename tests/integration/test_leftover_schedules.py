"""Leftover schedules against a real nats-server: a delayed job's schedule still stored after
its job fired (what a server killed between storing the fired job and removing the schedule
leaves) is removed by the sweep once its firing is claimed and it is past its grace; other
schedules stay.

The leftover state is built by hand: a server kill between the two writes cannot be timed.
Each schedule says ``@at`` far ahead (or in 2099), so the server never fires one during a test.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import nats
import pytest

from jsworker import App, current_job
from jsworker._core.queues import queue_status
from jsworker._runtime import upkeep
from jsworker._scheduling.claims import CANCELLED, claim
from jsworker._scheduling.delayed import due_ms
from jsworker._scheduling.leftovers import GRACE_MS, sweep_leftovers
from jsworker.jetstream.connection import Connection
from jsworker.testing import NatsServer

from ..support import connected, wait_until_async
from .secured import ADMIN, provision_as_admin
from .secured import role_app as _role_app
from .workers import in_process_worker

pytestmark = pytest.mark.anyio

_BODY = b'{"args": [1], "kwargs": {}}'


def _app(url: str, runs: list[str] | None = None) -> App:
    app = App("left", url)

    @app.task
    async def remind(n: int) -> None:
        if runs is not None:
            runs.append(current_job().id)

    return app


@asynccontextmanager
async def _worker_conn(app: App) -> AsyncIterator[Connection]:
    conn = await Connection.open(app.connect_options("worker", "test"))
    try:
        yield conn
    finally:
        await conn.close()


async def _schedules(url: str, stream: str, app: str) -> set[str]:
    async with connected(url) as nc:
        info = await nc.jetstream().stream_info(stream, subjects_filter=f"jsw.{app}.sched.>")
    return set(info.state.subjects or {})


async def _made_schedules(app: App, url: str, count: int) -> None:
    """Run a worker until it has made the app's enqueued delayed jobs ``count`` schedules and
    acknowledged the messages they were enqueued as (gone from the job stream)."""
    ns = app.namespace
    async with in_process_worker(app):
        await wait_until_async(
            lambda: _schedules(url, ns.schedules_stream, ns.app),
            until=lambda made: len(made) == count,
            timeout=10,
            message=f"{count} schedules",
        )
        await wait_until_async(
            lambda: _enqueued(url, ns.stream, ns.app), until=lambda left: not left, timeout=10
        )


async def _enqueued(url: str, stream: str, app: str) -> set[str]:
    async with connected(url) as nc:
        info = await nc.jetstream().stream_info(stream, subjects_filter=f"jsw.{app}.later.>")
    return set(info.state.subjects or {})


async def _delayed(app: App, conn: Connection) -> int:
    return sum(q.delayed for q in await queue_status(app, conn))


async def test_a_claimed_schedule_past_its_grace_is_removed_and_no_other(nats_server: NatsServer) -> None:
    """Delayed jobs enqueued an hour ahead, then swept as if that hour had passed: the one
    whose firing is claimed goes (a claim of a run, or of a cancel), the one nobody claimed
    and the one not yet past its grace stay; once claimed and past, they go too."""
    app = _app(nats_server.url)
    remind = app.tasks["remind"]
    eta = datetime.now(UTC) + timedelta(hours=1)
    ran = await remind.aapply((1,), eta=eta, job_id="ran")
    dropped = await remind.aapply((2,), eta=eta, job_id="dropped")
    waiting = await remind.aapply((3,), eta=eta, job_id="waiting")
    recent = await remind.aapply((4,), eta=eta + timedelta(seconds=30), job_id="recent")
    due = {j.id: due_ms(j.scheduled_for) for j in (ran, dropped, waiting, recent) if j.scheduled_for}
    ns = app.namespace
    await _made_schedules(app, nats_server.url, 4)
    async with _worker_conn(app) as conn:
        # What a worker taking up the fired job writes, and what a cancel racing it writes.
        assert await claim(conn, ns, "ran", due["ran"], "41") is None
        assert await claim(conn, ns, "dropped", due["dropped"], CANCELLED) is None
        assert await claim(conn, ns, "recent", due["recent"], "42") is None
        assert await _delayed(app, conn) == 4

        # "recent" is due 30 s after the others: still inside its grace.
        assert await sweep_leftovers(conn, ns, due["ran"] + GRACE_MS + 1) == 2
        left = await _schedules(nats_server.url, ns.schedules_stream, ns.app)
        assert left == {ns.delayed_subject("default", due[j], j) for j in ("waiting", "recent")}
        assert await _delayed(app, conn) == 2
        # Nothing left to remove at the same time: a second sweep (another worker) finds none.
        assert await sweep_leftovers(conn, ns, due["ran"] + GRACE_MS + 1) == 0

        later = due["recent"] + GRACE_MS
        assert await sweep_leftovers(conn, ns, later) == 1
        assert await sweep_leftovers(conn, ns, later) == 0  # "waiting": past due, never claimed
        assert await _delayed(app, conn) == 1
        assert await claim(conn, ns, "waiting", due["waiting"], "43") is None
        assert await sweep_leftovers(conn, ns, later) == 1
        assert await _delayed(app, conn) == 0
    await app.aclose()


async def test_one_sweep_checks_at_most_its_limit(nats_server: NatsServer) -> None:
    """Five claimed schedules past their grace and a limit of 2: two go per sweep, and every
    one of them goes in the end."""
    app = _app(nats_server.url)
    remind = app.tasks["remind"]
    eta = datetime.now(UTC) + timedelta(hours=1)
    jobs = [await remind.aapply((n,), eta=eta + timedelta(seconds=n)) for n in range(5)]
    ns = app.namespace
    await _made_schedules(app, nats_server.url, 5)
    async with _worker_conn(app) as conn:
        for job in jobs:
            assert job.scheduled_for is not None
            assert await claim(conn, ns, job.id, due_ms(job.scheduled_for), "7") is None
        now = due_ms(eta) + 10_000 + GRACE_MS
        assert [await sweep_leftovers(conn, ns, now, limit=2) for _ in range(4)] == [2, 2, 1, 0]
        assert await _delayed(app, conn) == 0
    await app.aclose()


async def test_a_worker_removes_the_schedule_kept_after_its_job_fired(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state a server killed between its two writes leaves, built by hand: the fired job
    stored, and its schedule after it. A worker runs the job (claiming it), and its sweep then
    removes the schedule, counting it; another delayed job's schedule with the same due time,
    never claimed, stays."""
    monkeypatch.setattr(upkeep, "LEFTOVER_INTERVAL", 0.2)
    runs: list[str] = []
    app = _app(nats_server.url, runs)
    await app.provision()
    # Due two minutes ago, past the grace on the server's clock; the schedules themselves say
    # 2099, so the server never fires them here.
    due = int(time.time() * 1000) - 2 * GRACE_MS
    ns = app.namespace
    subject = ns.delayed_subject("default", due, "left")
    kept_subject = ns.delayed_subject("default", due, "kept")
    target = ns.fired_subject(ns.job_subject("default", "remind", "left"))
    identity = {"Jsw-Task": "remind", "Jsw-Job-Id": "left", "Jsw-Scheduled-For": str(due)}
    async with connected(nats_server.url) as nc:
        js = nc.jetstream()
        # The firing first: the server removes the schedule a fired message names as it stores
        # it, so a schedule stored after it is one left behind.
        fired = {"Nats-Scheduler": subject, "Nats-Schedule-Next": "purge"}
        await js.publish(target, _BODY, headers={**identity, **fired})
        schedule = {**identity, "Nats-Schedule": "@at 2099-01-01T00:00:00Z", "Nats-Schedule-Target": target}
        await js.publish(subject, _BODY, headers=schedule)
        kept = {
            **schedule,
            "Jsw-Job-Id": "kept",
            "Nats-Schedule-Target": ns.fired_subject(ns.job_subject("default", "remind", "kept")),
        }
        await js.publish(kept_subject, _BODY, headers=kept)
    await app.aclose()
    assert await _schedules(nats_server.url, ns.schedules_stream, ns.app) == {subject, kept_subject}

    def removed() -> float | None:
        return app.metrics.registry.get_sample_value("jsworker_leftover_schedules_removed_total")

    before = removed() or 0.0  # the process-wide registry: other tests' workers count there too
    async with in_process_worker(app):
        await wait_until_async(lambda: runs == ["left"], timeout=15, message="the fired job to run")
        await wait_until_async(
            lambda: _schedules(nats_server.url, ns.schedules_stream, ns.app),
            until=lambda left: left == {kept_subject},
            timeout=15,
            message="the schedule left behind to be removed, the other kept",
        )
        await wait_until_async(removed, until=lambda n: n == before + 1, timeout=5, message="the count")
    assert runs == ["left"]


async def test_the_worker_role_may_sweep(secured: NatsServer) -> None:
    """With only the worker's permissions (``jsworker permissions``), a sweep reads the
    delayed jobs and the claims and deletes a leftover: nothing it does is refused."""
    url = secured.url
    await provision_as_admin(url)
    app = _role_app(url, "perm-worker")
    due = int(time.time() * 1000) - 2 * GRACE_MS
    subject = app.namespace.delayed_subject("default", due, "left")
    headers: dict[str, Any] = {
        "Jsw-Task": "add",
        "Jsw-Job-Id": "left",
        "Jsw-Scheduled-For": str(due),
        "Nats-Schedule": "@at 2099-01-01T00:00:00Z",
        "Nats-Schedule-Target": app.namespace.fired_subject(
            app.namespace.job_subject("default", "add", "left")
        ),
    }
    nc = await nats.connect(url, user=ADMIN[0], password=ADMIN[1])
    try:
        await nc.jetstream().publish(subject, _BODY, headers=headers)
    finally:
        await nc.close()
    conn = await Connection.open(app.connect_options("worker", "test"))
    try:
        assert await sweep_leftovers(conn, app.namespace) == 0  # not claimed: left alone
        assert await claim(conn, app.namespace, "left", due, "5") is None
        assert await sweep_leftovers(conn, app.namespace) == 1
        assert sum(q.delayed for q in await queue_status(app, conn)) == 0
    finally:
        await conn.close()
        await app.aclose()
