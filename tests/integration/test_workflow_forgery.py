"""Jobs that claim to be a workflow's steps without being stored by it, published on a real
server as a producer may (a job on the queue's subject with the ``Jsw-Flow`` headers, or a
second definition): each forged step is dead-lettered unrun with its reason and advances
nothing, and the workflow ends with its own steps' results."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest
from prometheus_client import REGISTRY

from jsworker import App, current_job
from jsworker._wire.headers import CONTENT_TYPE, ENQUEUED_AT, JOB_ID, MSG_ID, TASK
from jsworker.admin import Admin
from jsworker.jetstream.limits_stream import LimitsStream
from jsworker.testing import NatsServer
from jsworker.workflows import chain, chord
from jsworker.workflows._definition import FLOW, FLOW_STEP, FlowDef, done_subject, state_subject

from ..support import wait_until_async
from .secured import ADMIN, PASSWORD
from .workers import in_process_worker

pytestmark = pytest.mark.anyio


def make_app(url: str, ran: Counter[str], release: asyncio.Event | None = None, **connect: Any) -> App:
    """App ``perm`` (a name the secured server's users hold) with the tasks of these tests;
    ``part`` returns once ``release`` is set."""
    app = App("perm", url, workflows=True, max_retries=1, retry_backoff=0.05, **connect)

    @app.task
    async def add(x: int, y: int) -> int:
        ran[f"add {x} {y}"] += 1
        return x + y

    @app.task
    async def double(x: int) -> int:
        ran[f"double {x}"] += 1
        return 2 * x

    @app.task
    async def echo(value: Any) -> Any:
        ran[f"echo {value}"] += 1
        return value

    @app.task
    async def part(x: int) -> str:
        ran[f"part {x}"] += 1
        if release is not None:
            await release.wait()
        return f"real-{x}"

    @app.task
    async def held(x: int) -> int:
        ran[f"held {x}"] += 1
        if release is not None:
            await release.wait()
        return x

    @app.task
    async def flaky(x: int) -> int:
        ran[f"flaky {x} attempt {current_job().attempt}"] += 1
        if current_job().attempt == 1:
            raise ValueError("once")
        return x

    @app.task(store_result=True)
    async def collect(values: list[Any]) -> list[Any]:
        ran[f"collect {values}"] += 1
        return values

    return app


async def role_apps(url: str, ran: Counter[str], release: asyncio.Event) -> tuple[App, App, App]:
    """The app as the secured server's worker, producer and admin users see it, its streams
    provisioned (as admin) for the app the worker runs."""
    worker_app = make_app(url, ran, release, user="perm-worker", password=PASSWORD.format("perm-worker"))
    producer = make_app(url, Counter(), user="perm-producer", password=PASSWORD.format("perm-producer"))
    admin_app = make_app(url, Counter(), user=ADMIN[0], password=ADMIN[1])
    await admin_app.provision()
    return worker_app, producer, admin_app


async def forge(app: App, flow_id: str, step: str, job_id: str, value: Any, *, dedup: bool = True) -> None:
    """Publish an ``echo(value)`` job claiming to be ``step`` of ``flow_id``, with the headers a
    producer's enqueue writes; ``dedup=False`` names it as a unique job does (no message id,
    so the server stores it whatever id it has)."""
    echo = app.tasks["echo"]
    msg = app.producer.message(echo, echo.make_call((value,), None, job_id))
    headers = {
        TASK: "echo",
        ENQUEUED_AT: str(time.time_ns()),
        CONTENT_TYPE: msg.headers[CONTENT_TYPE],
        (MSG_ID if dedup else JOB_ID): job_id,
        FLOW: flow_id,
        FLOW_STEP: step,
    }
    assert msg.subject == app.namespace.job_subject("default", "echo", job_id)
    conn = await app.connections.connection()
    await conn.nc.publish(msg.subject, msg.body, headers=headers)
    await conn.nc.flush()


async def handled(admin: Admin, flow_id: str, forged: int) -> list[tuple[str, str]]:
    """The (job id, reason) of the dead letters, once the ``forged`` jobs were dealt with:
    dead-lettered, or (taken for steps) counted as ended members or ending the workflow."""

    async def done() -> bool:
        status = await admin.app.workflow(flow_id).astatus()
        taken = status.ended_members >= forged or status.state != "running"
        return taken or await admin.count_dead_letters() >= forged

    await wait_until_async(done, timeout=30, message="the forged jobs to be dealt with")
    return [(d.job_id, d.reason) for d in (await admin.dead_letters()).items]


def forgeries(what: str) -> float:
    return REGISTRY.get_sample_value("jsworker_workflow_forgeries_total", {"what": what}) or 0.0


async def test_forged_members_never_complete_a_chord(secured: NatsServer) -> None:
    """With the printed producer credentials: two jobs claiming to be a chord's members, one
    under an id of its own, one under the member's id, published while the real members run.
    Both are dead-lettered unrun; the callback gets the real members' results."""
    url = secured.url
    ran: Counter[str] = Counter()
    release = asyncio.Event()
    worker_app, producer, admin_app = await role_apps(url, ran, release)
    before = forgeries("step")
    try:
        async with in_process_worker(worker_app), Admin(admin_app) as admin:
            part, collect = producer.tasks["part"], producer.tasks["collect"]
            flow = await chord([part.s(1), part.s(2)], collect.s()).aapply()
            await wait_until_async(lambda: ran["part 1"] == ran["part 2"] == 1, timeout=30, message="members")
            await forge(producer, flow.id, "m0", "forged-m0", "FORGED-m0")
            await forge(producer, flow.id, "m1", f"{flow.id}-m1", "FORGED-m1", dedup=False)
            letters = await handled(admin, flow.id, 2)
            release.set()
            assert await admin_app.workflow(flow.id).aresult(timeout=30) == ["real-1", "real-2"]
    finally:
        await producer.aclose()
        await admin_app.aclose()
    assert sorted(job_id for job_id, _ in letters) == sorted(["forged-m0", f"{flow.id}-m1"])
    assert all(reason.startswith("forged workflow step") for _, reason in letters), letters
    assert not any(key.startswith("echo") for key in ran)
    assert ran[f"collect {['real-1', 'real-2']}"] == 1 and forgeries("step") - before == 2


async def test_the_servers_own_answers_on_a_chords_subjects_change_nothing(secured: NatsServer) -> None:
    """With the printed producer credentials, a publish whose reply subject is a chord's
    member result or its state: the server stores its acknowledgement there (replies are not
    permission-checked). Such a message carries no header; the workers take it for no result
    and no state, and the callback gets the real members' results, once."""
    url = secured.url
    ran: Counter[str] = Counter()
    release = asyncio.Event()
    worker_app, producer, admin_app = await role_apps(url, ran, release)
    try:
        async with in_process_worker(worker_app):
            part, collect = producer.tasks["part"], producer.tasks["collect"]
            flow = await chord([part.s(1), part.s(2)], collect.s()).aapply()
            await wait_until_async(lambda: ran["part 1"] == ran["part 2"] == 1, timeout=30, message="members")
            ns = producer.namespace
            conn = await producer.connections.connection()
            replies = (done_subject(ns, flow.id, 0), state_subject(ns, flow.id), done_subject(ns, flow.id, 1))
            for reply in replies:
                await conn.nc.publish(ns.job_subject("default", "echo"), b"{}", reply=reply)
            await conn.nc.flush()
            stored = LimitsStream(await admin_app.connections.connection(), ns.stream)
            for reply in replies:  # the server's acknowledgements, stored before any real write
                await wait_until_async(lambda: stored.count(reply), timeout=10, message=reply)  # noqa: B023
            release.set()
            assert await admin_app.workflow(flow.id).aresult(timeout=30) == ["real-1", "real-2"]
    finally:
        await producer.aclose()
        await admin_app.aclose()
    assert ran[f"collect {['real-1', 'real-2']}"] == 1


async def test_a_forged_last_step_neither_ends_nor_skips_a_chain(nats_server: NatsServer) -> None:
    """A job claiming to be a chain's last step, published while the chain's first step runs,
    is dead-lettered; every real step runs and the chain returns the last one's value."""
    ran: Counter[str] = Counter()
    release = asyncio.Event()
    app = make_app(nats_server.url, ran, release)
    held, double = app.tasks["held"], app.tasks["double"]
    async with in_process_worker(app), Admin(app) as admin:
        flow = await chain(held.s(3), double.s(), double.s()).aapply()
        await wait_until_async(lambda: ran["held 3"] == 1, timeout=30, message="the first step")
        await forge(app, flow.id, "2", f"{flow.id}-2", "FORGED", dedup=False)
        letters = await handled(admin, flow.id, 1)
        release.set()
        assert await flow.aresult(timeout=30) == 12
    assert ran == {"held 3": 1, "double 3": 1, "double 6": 1}
    assert letters == [(f"{flow.id}-2", letters[0][1])] and "never enqueued by it" in letters[0][1]


async def test_a_second_definition_is_counted_and_changes_nothing(nats_server: NatsServer) -> None:
    """A second message on a chain's definition subject, published after the start, is found
    and counted; the chain runs with the first definition's arguments."""
    ran: Counter[str] = Counter()
    app = make_app(nats_server.url, ran)
    add = app.tasks["add"]
    await app.provision()
    flow = await chain(add.s(1, 2), add.s(5)).aapply()
    forged = FlowDef(flow.id, "chain", [add.s(1, 2).describe(False), add.s(500).describe(True)])
    conn = await app.connections.connection()
    await conn.nc.publish(f"jsw.perm.flow.def.{flow.id}", forged.encode(app.serializer))
    await conn.nc.flush()
    await app.aclose()
    before = forgeries("definition")
    async with in_process_worker(app):
        assert await flow.aresult(timeout=30) == 8
        # A step the workers enqueued is genuine on each of its deliveries: a retried one too.
        again = await chain(add.s(2, 2), app.tasks["flaky"].s()).aapply()
        assert await again.aresult(timeout=30) == 4
    assert ran == {"add 1 2": 1, "add 3 5": 1, "add 2 2": 1, "flaky 4 attempt 1": 1, "flaky 4 attempt 2": 1}
    assert forgeries("definition") - before == 1
