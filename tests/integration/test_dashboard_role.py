"""The web dashboard's own credential, the ``dashboard`` role ``jsworker permissions`` prints,
against a real server that holds exactly those permissions: every page and every action of the
dashboard works with it, and what the role must not do, tried as an attacker holding the
credential would, is refused by the server."""

from __future__ import annotations

from pathlib import Path

import nats
import pytest
import structlog
from nats.aio.msg import Msg

from jsworker import App, PermissionDeniedError
from jsworker._lifecycle.state import JobRecord, JobState
from jsworker.admin import Admin
from jsworker.jetstream.api import api_subject, request_json
from jsworker.jetstream.connection import Connection
from jsworker.testing import NatsServer
from jsworker.ui import create_app

from ..support import wait_until_async
from .secured import ADMIN, PASSWORD, as_user, provision, role_app
from .ui_support import client, no_traceback, post
from .workers import records, start_worker, stop

pytestmark = pytest.mark.anyio


def _dashboard_app(url: str) -> App:
    """App ``perm`` as the dashboard sees it: with job events on, as ``perm_app`` runs."""
    app = role_app(url, "perm-dashboard")
    app.configure_options(events=True)
    return app


async def _install_schedule(url: str) -> None:
    """A periodic schedule ``hourly`` on the server (installed by ``admin``)."""
    app = App("perm", url, user=ADMIN[0], password=ADMIN[1])

    @app.task
    async def add(a: int, b: int) -> int:
        return a + b

    app.schedule(add, every=3600, name="hourly", args=(1, 1))
    async with Admin(app) as admin:
        await admin.sync_schedules()
    await app.aclose()


@pytest.mark.usefixtures("info_logging")
async def test_the_dashboard_role_is_all_the_dashboard_needs(secured: NatsServer, tmp_path: Path) -> None:
    url, record, log, gate = secured.url, tmp_path / "record", tmp_path / "worker.log", tmp_path / "gate"
    provision(url)
    worker = start_worker(url, record, log, module="perm_app", env=as_user("perm-worker"))
    dashboard = _dashboard_app(url)
    try:
        async with client(create_app(dashboard)) as http, Admin(dashboard, role="dashboard") as admin:
            # Its entry comes once it made the streams: the events stream too, so that the
            # enqueued events below are kept.
            await wait_until_async(admin.workers, timeout=20, message="the worker's entry")
            producer = role_app(url, "perm-producer")
            producer.configure_options(events=True)  # as perm_app: its jobs' enqueued events
            refused = await producer.tasks["refuse"].adelay()
            later = await producer.tasks["add"].aapply((1, 2), countdown=600)
            added = await producer.tasks["add"].adelay(2, 3)
            running = await producer.tasks["hold"].adelay(str(gate))
            queued = await producer.tasks["hold"].adelay(str(gate))  # behind it: one at a time on gated
            resting = await producer.tasks["not_yet"].adelay()
            await producer.aclose()
            await wait_until_async(lambda: admin.count_dead_letters(), until=lambda n: n == 1, timeout=20)
            await wait_until_async(lambda: admin.job(running.id), until=lambda s: s.state is JobState.RUNNING)
            await wait_until_async(
                lambda: admin.job(resting.id), until=lambda s: s.state is JobState.RETRYING
            )
            await wait_until_async(lambda: admin.job(added.id), until=lambda s: s.state is JobState.SUCCEEDED)
            await _install_schedule(url)
            with structlog.testing.capture_logs() as logged:
                pages = [
                    "/",
                    "/live.json",
                    "/queues/gated",
                    "/queues/gated/purge",
                    "/jobs",
                    "/jobs?state=running",
                    "/jobs?state=retrying",
                    "/jobs?state=scheduled",
                    "/jobs?state=failed",
                    "/dead-letters",
                    "/dead-letters/1",
                    "/dead-letters/1?show=payload",
                    "/dead-letters/purge",
                    "/workers",
                    "/schedules",
                    f"/jobs/{later.id}?show=payload",
                    f"/jobs/{running.id}",
                    f"/jobs/{queued.id}",
                    f"/jobs/{added.id}?show=result",
                    "/charts",
                    "/jobs?state=succeeded",
                    "/jobs?state=cancelled",
                    f"/job?id={added.id[:10]}",
                    "/job?id=some text",
                    "/jobs/all?verb=cancel&state=queued&queue=gated",
                ]
                for path in pages:
                    page = await http.get(path)
                    no_traceback(page)
                    assert page.status_code == 200, (path, page.text[-500:])
                # The events are the dashboard's to read: the charts and a job's timeline.
                assert (await http.get("/live.json")).json()["charts"]["source"] == "events"
                timeline = (await http.get(f"/jobs/{added.id}")).text
                assert "badge event-enqueued" in timeline and "badge event-succeeded" in timeline
                assert "On <code>" in (await http.get("/workers")).text  # the running job's worker

                for path, data in (
                    ("/queues/gated/pause", {}),
                    ("/queues/gated/resume", {}),
                    (f"/jobs/{resting.id}/retry", {}),
                    ("/jobs/cancel", {"id": [later.id, running.id]}),
                    ("/jobs/replay", {"seq": "1"}),
                    ("/dead-letters/1/delete", {}),  # replayed: gone, which the dashboard may ask
                    ("/schedules/hourly/trigger", {}),
                    ("/schedules/hourly/pause", {}),
                    ("/schedules/hourly/resume", {}),
                    ("/schedules/hourly/remove", {}),
                    ("/schedules/put", {"name": "dash", "task": "add", "every": "3600", "args": "[1, 2]"}),
                    ("/schedules/dash/remove", {}),
                    ("/queues/gated/purge", {"confirm": "gated"}),
                    ("/dead-letters/purge", {"confirm": "purge"}),
                ):
                    done = await post(http, path, data)
                    assert done.status_code == 303, (path, done.text[-500:])
                    said = await http.get(done.headers["location"])
                    assert "may not" not in said.text and "Not allowed" not in said.text, (path, said.text)
                    if path in ("/schedules/hourly/pause", "/schedules/hourly/resume"):
                        # Carried out by a worker: the dashboard may not write schedules.
                        (hourly,) = await admin.schedules()
                        assert hourly.paused is path.endswith("/pause"), path
            # Each did what it says, though the dashboard itself may write no record: the
            # workers carried the cancels out.
            assert (await admin.job(later.id)).state is JobState.CANCELLED
            assert (await admin.job(running.id)).state is JobState.CANCELLED
            assert await admin.schedules() == []
            assert not any(line["event"] == "nats.permission_denied" for line in logged), logged
            assert [a["action"] for a in logged if a["event"] == "ui.action"][:2] == [
                "pause_queue",
                "resume_queue",
            ]
    finally:
        gate.touch()
        await dashboard.aclose()
        assert stop(worker) == 0
    assert "permission" not in log.read_text().lower()
    assert refused.id and records(record)


async def test_the_dashboard_may_not_run_change_or_stop_jobs_itself(
    secured: NatsServer, tmp_path: Path
) -> None:
    """Holding the dashboard's credential, one cannot take a job from a queue, create a stream
    or a consumer, forge a job's record, a claim, a dead letter or an event, tell a worker to
    stop a job, advance a workflow, or listen to what others receive: each is refused by the
    server, and the running job finishes with its real result. With no worker running, the
    dashboard cannot cancel a job either: it may only ask the workers."""
    url, record, gate = secured.url, tmp_path / "record", tmp_path / "gate"
    provision(url)
    worker = start_worker(url, record, tmp_path / "worker.log", module="perm_app", env=as_user("perm-worker"))
    dashboard = _dashboard_app(url)
    try:
        producer = role_app(url, "perm-producer")
        running = await producer.tasks["hold"].adelay(str(gate))
        waiting = await producer.tasks["hold"].adelay(str(gate))
        await wait_until_async(
            lambda: running.id in {j for j, _, _ in records(record, "started")},
            timeout=20,
            message="the job to start",
        )
        conn = await Connection.open(dashboard.connect_options("dashboard", "attack"))
        try:
            forged = JobRecord(
                JobState.SUCCEEDED, "gated", "hold", seq=running.seq, value=b'"FORGED"'
            ).encode()
            for subject, body in (
                (f"$KV.jsw_perm_jobs.{running.id}", forged),  # a forged result
                (f"jsw.perm.halt.{running.id}", str(running.seq).encode()),  # stop the running job
                (f"jsw.perm.claim.{running.id}.1", b"1"),
                ("jsw.perm.dlq.gated.hold", b"{}"),
                ("jsw.perm.ev.gated.hold.succeeded", b"{}"),
                ("jsw.perm.ev.gated.hold.enqueued", b"{}"),
                ("jsw.perm.flow.state.flow1", b'{"step":5}'),
                ("jsw.perm.flow.def.flow1", b"{}"),
                ("jsw.perm.tally.flow1", b""),
                ("jsw.perm.sched.at.gated.1.evil", b""),
                ("$KV.jsw_perm_workers.evil", b"{}"),
                (f"jsw.perm.ask.status.{running.id}", b""),
            ):
                with pytest.raises(PermissionDeniedError) as refused:
                    await conn.nc.request(subject, body, timeout=5)
                assert refused.value.subject.lower() == subject.lower()
            for verb, request in (
                # Pull a job from a queue's consumer (it would run nowhere, or be lost).
                (("CONSUMER.MSG.NEXT", "JSW_PERM", "gated"), {"batch": 1}),
                # Create or change a stream or a queue's consumer.
                (("STREAM.CREATE", "JSW_PERM_EVIL"), {"name": "JSW_PERM_EVIL", "subjects": ["evil.>"]}),
                (("STREAM.UPDATE", "JSW_PERM"), {"name": "JSW_PERM"}),
                (("STREAM.DELETE", "JSW_PERM"), {}),
                (("CONSUMER.CREATE", "JSW_PERM", "evil"), {"stream_name": "JSW_PERM", "config": {}}),
                (("CONSUMER.DURABLE.CREATE", "JSW_PERM", "evil"), {"stream_name": "JSW_PERM", "config": {}}),
                (("CONSUMER.DELETE", "JSW_PERM", "gated"), {}),
                (("STREAM.PURGE", "KV_jsw_perm_jobs"), {}),
                (("STREAM.MSG.DELETE", "KV_jsw_perm_jobs"), {"seq": 1}),
            ):
                with pytest.raises(PermissionDeniedError):
                    await request_json(conn, api_subject(*verb), request)
        finally:
            await conn.close()
        # What others receive stays theirs: no subscription to the workers' or producers'
        # inboxes, the jobs' subjects, the questions the workers answer, or everything.
        denied: list[str] = []
        got: list[str] = []

        async def on_error(exc: Exception) -> None:
            denied.append(str(exc))

        async def on_msg(msg: Msg) -> None:
            got.append(msg.subject)

        spy = await nats.connect(
            url, user="perm-dashboard", password=PASSWORD.format("perm-dashboard"), error_cb=on_error
        )
        spied = [
            "_jsw_inbox.perm.worker.>",
            "_jsw_inbox.perm.producer.>",
            "jsw.perm.q.>",
            "jsw.perm.ask.*.*",
            ">",
        ]
        for subject in spied:
            await spy.subscribe(subject, cb=on_msg)
        await spy.flush()
        await wait_until_async(lambda: len(denied) >= len(spied), timeout=10, message="every refusal")
        await spy.close()
        assert got == []

        gate.touch()
        assert await running.aresult(timeout=20) == "real"
        assert await waiting.aresult(timeout=20) == "real"
        await producer.aclose()
    finally:
        gate.touch()
        assert stop(worker) == 0

    # No worker runs now: the dashboard may only ask for a cancel, and nobody answers.
    producer = role_app(url, "perm-producer")
    orphan = await producer.tasks["add"].adelay(1, 1)
    await producer.aclose()
    async with client(create_app(dashboard)) as http:
        refused_page = await post(http, f"/jobs/{orphan.id}/cancel", page=f"/jobs/{orphan.id}")
        no_traceback(refused_page)
        assert refused_page.status_code == 503 and "no worker of app perm is running" in refused_page.text
    await dashboard.aclose()
    async with Admin(role_app(url, "perm-operator")) as operator:
        assert (await operator.job(orphan.id)).state is JobState.QUEUED
