"""A producer or canceller that holds the credentials ``jsworker permissions`` prints, used as
an attacker would: each attack is refused by the server or has no effect (the real job runs
once, its waiter gets the real result, nothing vanishes without a record)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import nats
import nats.js.errors
import pytest

from jsworker import Admin, App, JobCancelled, PermissionDeniedError
from jsworker._lifecycle.state import JobRecord, JobState
from jsworker.jetstream.api import api_subject, request_json
from jsworker.jetstream.connection import Connection
from jsworker.jetstream.service import gather
from jsworker.testing import NatsServer

from ..support import wait_until_async
from .secured import ADMIN, PASSWORD, as_user, provision, role_app, role_session
from .workers import records, start_worker, stop

DUE = "Jsw-Scheduled-For"
# The job stream allows no message schedules: its answer to a schedule header.
SCHEDULES_DISABLED = 10188
# Its answers to a rollup, a time to live and a scheduler's purge (by server version).
REFUSED_HEADERS = {10111, 10166, SCHEDULES_DISABLED, 10212}


async def _connect(app: App) -> Connection:
    return await Connection.open(app.connect_options("producer", "attack"))


async def _refused(conn: Connection, subject: str, body: bytes = b"") -> None:
    """``subject`` is refused to ``conn``'s user, named in the error."""
    with pytest.raises(PermissionDeniedError) as refused:
        await conn.nc.request(subject, body, timeout=5)
    assert refused.value.subject.lower() == subject.lower()


async def _subjects(url: str, stream: str) -> dict[str, int]:
    """The subjects of ``stream`` with their message counts, read as ``admin``."""
    nc = await nats.connect(url, user=ADMIN[0], password=ADMIN[1])
    try:
        info = await nc.jetstream().stream_info(stream, subjects_filter=">")
        return dict(info.state.subjects or {})
    finally:
        await nc.close()


async def _started(record: Path, job_id: str) -> None:
    await wait_until_async(
        lambda: job_id in {j for j, _, _ in records(record, "started")},
        timeout=20,
        message="the job to start",
    )


def _forged_success(job_seq: int) -> bytes:
    return JobRecord(JobState.SUCCEEDED, "gated", "hold", seq=job_seq, value=b'"FORGED"',
                     content_type="application/json").encode()  # fmt: skip


def test_a_producer_can_only_add_work(secured: NatsServer, tmp_path: Path) -> None:
    """Forged results, cancels (old and new subjects) and claims, reading and deleting job
    messages, asking for a cancel: all refused. The running job and a delayed one run once and
    their waiters get the real results."""
    url, record, gate = secured.url, tmp_path / "record", tmp_path / "gate"
    provision(url)
    worker = start_worker(url, record, tmp_path / "worker.log", module="perm_app", env=as_user("perm-worker"))

    async def scenario() -> None:
        async with role_session(url, "perm-producer") as producer:
            running = await producer.tasks["hold"].adelay(str(gate))
            delayed = await producer.tasks["add"].aapply((20, 22), countdown=1)
            assert delayed.scheduled_for is not None
            due_ms = round(delayed.scheduled_for.timestamp() * 1000)
            await _started(record, running.id)
            conn = await _connect(producer)
            try:
                await _refused(conn, f"$KV.jsw_perm_jobs.{running.id}", _forged_success(running.seq))
                await _refused(conn, f"jsw.perm.cancel.{running.id}", str(running.seq).encode())
                await _refused(conn, f"jsw.perm.halt.{running.id}", str(running.seq).encode())
                await _refused(conn, f"jsw.perm.claim.{delayed.id}.{due_ms}", b"1")
                await _refused(conn, f"jsw.perm.claim.{running.id}.back", b"")
                # A workflow's state and its members' results are the workers' to write: a
                # forged state could skip a chain's steps or fire a chord's callback early.
                await _refused(conn, "jsw.perm.flow.state.flow1", b'{"step":5}')
                await _refused(conn, "jsw.perm.flow.done.flow1.0", b'{"ok":1}')
                for verb, request in (
                    ("MSG.GET", {"seq": running.seq}),
                    ("MSG.DELETE", {"seq": running.seq}),
                ):
                    with pytest.raises(PermissionDeniedError):
                        await request_json(conn, api_subject(f"STREAM.{verb}", "JSW_PERM"), request)
                with pytest.raises(PermissionDeniedError):
                    await request_json(conn, api_subject("STREAM.INFO", "JSW_PERM"), {"subjects_filter": ">"})
            finally:
                await conn.close()
            with pytest.raises(PermissionDeniedError, match=r"ask\.cancel"):
                await producer.acancel(running.id)
            # What a producer may learn of its job: its status, through the workers.
            status = await producer.astatus(running.id)
            assert status.state is JobState.RUNNING and status.seq == running.seq
            # Who runs it, since when, which attempt: the worker running it says so.
            assert status.worker and status.started_at is not None and status.attempts == 1, status
            gate.touch()
            assert await running.aresult(timeout=20) == "real"
            assert await delayed.aresult(timeout=20) == 42
            assert (await producer.astatus(running.id)).state is JobState.SUCCEEDED

    try:
        asyncio.run(scenario())
    finally:
        assert stop(worker) == 0
    assert [event for event in ("started", "done") for _ in records(record, event)].count("done") == 2


def test_a_halt_the_server_does_not_confirm_changes_nothing(secured: NatsServer, tmp_path: Path) -> None:
    """Even from a role that may send it (an operator), a notice to stop a running job whose
    message is still on the server is ignored: no worker answers, the job finishes."""
    url, record, gate = secured.url, tmp_path / "record", tmp_path / "gate"
    provision(url)
    worker = start_worker(url, record, tmp_path / "worker.log", module="perm_app", env=as_user("perm-worker"))

    async def scenario() -> None:
        async with role_session(url, "perm-producer") as producer:
            running = await producer.tasks["hold"].adelay(str(gate))
            await _started(record, running.id)
            operator = role_app(url, "perm-operator")
            conn = await Connection.open(operator.connect_options("operator", "attack"))
            try:
                halt = f"jsw.perm.halt.{running.id}"
                assert await gather(conn, halt, str(running.seq).encode(), wait=1.0, linger=0.1) == []
            finally:
                await conn.close()
            gate.touch()
            assert await running.aresult(timeout=20) == "real"

    try:
        asyncio.run(scenario())
    finally:
        assert stop(worker) == 0


def test_a_producer_installs_no_schedule_and_passes_no_job_off_as_fired(
    secured: NatsServer, tmp_path: Path
) -> None:
    """What once let a producer install a job that runs forever: a schedule on the schedules
    stream is refused by the permissions; a schedule header on a subject it may write (a
    delayed job's, a job's) is refused by the job stream, which allows no schedules; a job
    dressed up as a firing (the marks a worker puts on what it moves) is dead-lettered unrun,
    before its time or not, and the delayed job it names still runs once, with its own body."""
    url, record = secured.url, tmp_path / "record"
    provision(url)
    worker = start_worker(url, record, tmp_path / "worker.log", module="perm_app", env=as_user("perm-worker"))

    async def scenario() -> str:
        async with role_session(url, "perm-producer") as producer:
            victim = await producer.tasks["add"].aapply((5, 5), countdown=2)
            assert victim.scheduled_for is not None
            victim_due = round(victim.scheduled_for.timestamp() * 1000)
            conn = await _connect(producer)
            now = int(time.time() * 1000)
            body = json.dumps({"args": [1, 2], "kwargs": {}}).encode()
            repeat = {"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": "jsw.perm.fired.default.add"}
            try:
                await _refused(conn, f"jsw.perm.sched.at.default.{now}.evil")
                await _refused(conn, "jsw.perm.sched.repeat.evil")
                for subject in (f"jsw.perm.later.default.{now}.evil", "jsw.perm.q.default.add.evil"):
                    with pytest.raises(nats.js.errors.BadRequestError) as refused:
                        await conn.js.publish(subject, body, headers={**repeat, "Jsw-Task": "add"})
                    assert refused.value.err_code == SCHEDULES_DISABLED
                for job_id, due in ((victim.id, victim_due), ("early", now + 3_600_000)):
                    # What a worker moving a firing writes, but the claim.
                    await conn.js.publish("jsw.perm.q.default.add", body, headers={
                        "Jsw-Fired-By": f"jsw.perm.sched.at.default.{due}.{job_id}",
                        "Jsw-Fired-Next": "purge", "Jsw-Fired-Claim": "1.guessed",
                        "Jsw-Task": "add", "Jsw-Job-Id": job_id, DUE: str(due),
                    })  # fmt: skip
            finally:
                await conn.close()

            await wait_until_async(
                lambda: _dlq_reasons(url),
                until=lambda reasons: (
                    any("which did not fire it" in r for r in reasons)
                    and any("early before it was due" in r for r in reasons)
                ),
                timeout=20,
                message="the two forged firings to be dead-lettered",
            )
            assert await victim.aresult(timeout=20) == 10  # its own body, not 1 + 2
            return victim.id

    try:
        victim_id = asyncio.run(scenario())
    finally:
        assert stop(worker) == 0
    assert [j for j, _, _ in records(record)] == [victim_id]  # once; no forged job ran


def test_no_header_of_a_producer_removes_anything(secured: NatsServer, tmp_path: Path) -> None:
    """What once wiped an app with one message: ``Nats-Rollup: all`` (with ``Nats-TTL: 1s``)
    on any subject a producer writes, ``Nats-Rollup: sub`` on a victim's own subject, and a
    purge through ``Nats-Schedule-Next``. The job stream refuses each (it allows no rollups,
    schedules or times to live), the schedules stream refuses the producer altogether, and a
    running job, a queued one and a delayed one are all still there; the queued one then
    runs."""
    url, record, gate = secured.url, tmp_path / "record", tmp_path / "gate"
    provision(url)
    worker = start_worker(url, record, tmp_path / "worker.log", module="perm_app", env=as_user("perm-worker"))

    async def scenario() -> None:
        async with role_session(url, "perm-producer") as producer:
            running, queued = [await producer.tasks["hold"].adelay(str(gate)) for _ in range(2)]
            await _started(record, running.id)
            scheduled = await producer.tasks["add"].aapply((1, 1), countdown=300)
            await wait_until_async(
                lambda: _subjects(url, "JSW_PERM_SCHED"),
                timeout=20,
                message="the delayed job made a schedule",
            )
            # And its enqueued message acknowledged (gone): what stands from here on must stay.
            jobs = await wait_until_async(
                lambda: _subjects(url, "JSW_PERM"),
                until=lambda subjects: not any(".later." in s for s in subjects),
                timeout=20,
                message="the delayed job's enqueued message gone",
            )
            schedules = await _subjects(url, "JSW_PERM_SCHED")
            conn = await _connect(producer)
            now = int(time.time() * 1000)
            try:
                await _refused(conn, f"jsw.perm.sched.at.default.{now}.evil")
                wipes = [
                    (subject, {"Nats-Rollup": "all", "Nats-TTL": "1s"})
                    for subject in ("jsw.perm.q.default.add", f"jsw.perm.later.default.{now}.evil")
                ]
                wipes += [
                    (f"jsw.perm.q.gated.hold.{queued.id}", {"Nats-Rollup": "sub"}),
                    (
                        "jsw.perm.q.default.add",
                        {"Nats-Scheduler": f"jsw.perm.later.default.{now}.x", "Nats-Schedule-Next": "purge"},
                    ),
                ]
                for subject, headers in wipes:
                    with pytest.raises(nats.js.errors.APIError) as refused:
                        await conn.js.publish(subject, b"", headers=headers)
                    assert refused.value.err_code in REFUSED_HEADERS, (subject, refused.value)
            finally:
                await conn.close()
            assert await _subjects(url, "JSW_PERM") == jobs
            assert await _subjects(url, "JSW_PERM_SCHED") == schedules
            for job in (running, queued, scheduled):
                assert (await producer.astatus(job.id)).state is not JobState.UNKNOWN, job.id
            gate.touch()
            assert await queued.aresult(timeout=20) == "real"

    try:
        asyncio.run(scenario())
    finally:
        gate.touch()
        assert stop(worker) == 0


def test_the_servers_own_answer_on_a_claim_drops_no_firing(secured: NatsServer, tmp_path: Path) -> None:
    """A producer may not write a claim, but the server stores its acknowledgement of any
    publish on the reply subject the publisher names (replies are not permission-checked):
    sent to a delayed job's claim before it fires, it would make the real firing a second
    copy. Such a message carries no header and is no claim: the job runs once, when due."""
    url, record = secured.url, tmp_path / "record"
    provision(url)
    worker = start_worker(url, record, tmp_path / "worker.log", module="perm_app", env=as_user("perm-worker"))

    async def scenario() -> str:
        async with role_session(url, "perm-producer") as producer:
            victim = await producer.tasks["add"].aapply((5, 5), countdown=2)
            assert victim.scheduled_for is not None
            subject = producer.namespace.claim_subject(
                victim.id, round(victim.scheduled_for.timestamp() * 1000)
            )
            conn = await _connect(producer)
            try:
                await conn.nc.publish("jsw.perm.q.default.add.squat", b"{}", reply=subject)
                await conn.nc.flush()
                await wait_until_async(
                    lambda: _subjects(url, "JSW_PERM_CLAIMS"),
                    until=lambda claims: subject in claims,
                    timeout=10,
                    message="the server's answer stored on the claim",
                )
            finally:
                await conn.close()
            assert await victim.aresult(timeout=20) == 10
            return victim.id

    try:
        victim_id = asyncio.run(scenario())
    finally:
        assert stop(worker) == 0
    assert [j for j, _, _ in records(record)].count(victim_id) == 1


async def _dlq_reasons(url: str) -> list[str]:
    """The reasons of every dead letter of app ``perm``, read as ``admin``."""
    nc = await nats.connect(url, user=ADMIN[0], password=ADMIN[1])
    try:
        js = nc.jetstream()
        state = (await js.stream_info("JSW_PERM_DLQ")).state
        reasons = []
        for seq in range(state.first_seq, state.last_seq + 1 if state.messages else 0):
            msg = await js.get_msg("JSW_PERM_DLQ", seq)
            reasons.append((msg.headers or {}).get("Jsw-Dlq-Reason", ""))
        return reasons
    finally:
        await nc.close()


def test_a_canceller_cancels_and_does_nothing_more(secured: NatsServer, tmp_path: Path) -> None:
    """The canceller cancels a delayed, a queued and a running job (through the workers) and
    is refused every forgery a producer is refused."""
    url, record, gate = secured.url, tmp_path / "record", tmp_path / "gate"
    provision(url)
    worker = start_worker(url, record, tmp_path / "worker.log", module="perm_app", env=as_user("perm-worker"))

    async def scenario() -> None:
        async with role_session(url, "perm-canceller") as canceller:
            hold = canceller.tasks["hold"]
            running = await hold.adelay(str(gate))
            queued = await hold.adelay(str(gate))  # waits behind the running one (max_running=1)
            delayed = await canceller.tasks["add"].aapply((1, 1), countdown=120)
            await _started(record, running.id)
            assert (await canceller.astatus(queued.id)).state is JobState.QUEUED
            for job in (delayed, queued, running):
                assert await canceller.acancel(job.id), job
                cancelled = await canceller.astatus(job.id)
                state = (cancelled.state, cancelled.queue, cancelled.task)
                assert state == (JobState.CANCELLED, job.queue, job.task), cancelled
                assert not await canceller.acancel(job.id)  # nothing left to cancel
            with pytest.raises(JobCancelled):
                await running.aresult(timeout=10)
            conn = await _connect(canceller)
            try:
                await _refused(conn, f"$KV.jsw_perm_jobs.{running.id}", _forged_success(running.seq))
                await _refused(conn, f"jsw.perm.halt.{running.id}", str(running.seq).encode())
                await _refused(conn, f"jsw.perm.claim.{delayed.id}.1", b"1")
                with pytest.raises(PermissionDeniedError):
                    await request_json(conn, api_subject("STREAM.MSG.DELETE", "JSW_PERM"), {"seq": 1})
            finally:
                await conn.close()
            # The next job on the queue still runs: the cancelled one freed its slot.
            gate.touch()
            after = await hold.adelay(str(gate))
            assert await after.aresult(timeout=20) == "real"

    try:
        asyncio.run(scenario())
    finally:
        assert stop(worker) == 0
    started = {job for job, _, _ in records(record, "started")}
    assert len(started) == 2  # the cancelled running job and the last one; the queued never started


def test_a_producer_enqueues_unique_jobs_without_reading_the_job_stream(
    secured: NatsServer, tmp_path: Path
) -> None:
    """A unique task's second job, immediate or delayed, while the first waits or runs: a
    duplicate naming the first, found by asking the workers. With no worker running the
    server still refuses a second job of the same form. A delayed one made a schedule holds
    its key through the marker the worker writes with its grants; a producer may write no
    marker (one would hold a key no job has)."""
    url, record, gate = secured.url, tmp_path / "record", tmp_path / "gate"

    async def alone() -> str:
        async with role_session(url, "perm-producer") as producer:
            once = producer.tasks["hold_once"]
            first = await once.adelay(str(gate))
            again = await once.adelay(str(gate))
            assert not first.duplicate and again.duplicate and again.id == first.id
            return first.id

    provision(url)
    job_id = asyncio.run(alone())
    worker = start_worker(url, record, tmp_path / "worker.log", module="perm_app", env=as_user("perm-worker"))

    async def with_worker() -> None:
        async with role_session(url, "perm-producer") as producer:
            once = producer.tasks["hold_once"]
            await _started(record, job_id)
            running = await once.adelay(str(gate))
            assert running.duplicate and running.id == job_id and running.seq > 0  # the workers named it
            delayed = await once.aapply((str(gate),), countdown=60)
            assert delayed.duplicate and delayed.id == job_id
            gate.touch()
            assert await running.aresult(timeout=20) == "real"
            later = await once.aapply((str(tmp_path / "later"),), countdown=60)
            subjects = await wait_until_async(
                lambda: _subjects(url, "JSW_PERM"),
                until=lambda found: (
                    any(".mark." in s for s in found) and not any(".later." in s for s in found)
                ),
                timeout=20,
                message="the worker to make the delayed job a schedule and mark its key",
            )
            held = await once.adelay(str(tmp_path / "later"))
            assert held.duplicate and held.id == later.id and held.scheduled_for is not None
            mark = next(s for s in subjects if ".mark." in s)
            conn = await _connect(producer)
            try:
                await _refused(conn, mark.rsplit(".", 1)[0] + ".forged", b"")
            finally:
                await conn.close()

    try:
        asyncio.run(with_worker())
    finally:
        assert stop(worker) == 0


def test_flow_control_and_workflow_grants_cannot_be_misused(secured: NatsServer) -> None:
    """What this wave granted, tried against with the printed credentials: a producer cannot
    take or free a partition lease, count against a rate limit, count a group's members or
    read the leases; a worker may count and take leases but cannot purge the rates or leases
    streams, delete a lease by hand (it gives one back by a write over its own), or delete a
    workflow tally stream."""
    url = secured.url

    async def attack() -> None:
        async with role_session(url, "perm-producer") as producer:
            conn = await Connection.open(producer.connect_options("producer", "attack"))
            try:
                for subject in (
                    "jsw.perm.lease.add.abc.0",
                    "jsw.perm.rate.q-default.1",
                    "jsw.perm.tally.flow1",
                ):
                    await _refused(conn, subject, b"")
                with pytest.raises(PermissionDeniedError):
                    await request_json(conn, "$JS.API.DIRECT.GET.JSW_PERM_LEASES", {"seq": 1})
            finally:
                await conn.close()
        async with role_session(url, "perm-worker") as worker:
            conn = await Connection.open(worker.connect_options("worker", "attack"))
            try:
                for verb, stream in (
                    ("STREAM.PURGE", "JSW_PERM_RATES"),
                    ("STREAM.PURGE", "JSW_PERM_LEASES"),
                    ("STREAM.MSG.DELETE", "JSW_PERM_LEASES"),
                    ("STREAM.DELETE", "JSW_PERM_TALLY"),
                ):
                    with pytest.raises(PermissionDeniedError):
                        await request_json(conn, api_subject(verb, stream), {"seq": 1})
            finally:
                await conn.close()

    asyncio.run(attack())


def test_fair_queue_grants_cannot_be_misused(secured: NatsServer, tmp_path: Path) -> None:
    """A producer may put a job in a fair queue's intake, nothing more: it cannot read, delete
    or follow what waits there, nor take the queue's mover lease. A worker with the printed
    credentials moves the jobs in turns and runs each once."""
    url, record = secured.url, tmp_path / "record"
    provision(url, "perm_fair_app")
    worker = start_worker(
        url,
        record,
        tmp_path / "worker.log",
        "--log-level",
        "info",
        module="perm_fair_app",
        env=as_user("perm-worker"),
    )

    async def scenario() -> None:
        producer = App("perm", url, user="perm-producer", password=PASSWORD.format("perm-producer"))
        producer.queue("turns", fair=True)

        @producer.task(queue="turns", partition_key=lambda account, **_: account, store_result=True)
        async def visit(account: str) -> str:
            return account  # run by the worker (apps/perm_fair_app.py), never here

        try:
            jobs = [await visit.adelay(account) for account in ("a", "b", "a")]
            conn = await _connect(producer)
            try:
                await _refused(conn, "jsw.perm.lease.turns.fair.0", b"")
                for verb, request in (
                    ("STREAM.MSG.GET", {"seq": jobs[0].seq}),
                    ("STREAM.MSG.DELETE", {"seq": jobs[0].seq}),
                    ("CONSUMER.CREATE", {"stream_name": "JSW_PERM", "config": {"ack_policy": "explicit"}}),
                ):
                    with pytest.raises(PermissionDeniedError):
                        await request_json(conn, api_subject(verb, "JSW_PERM"), request)
            finally:
                await conn.close()
            assert [await job.aresult(timeout=30) for job in jobs] == ["a", "b", "a"]
        finally:
            await producer.aclose()

    try:
        asyncio.run(scenario())
    finally:
        assert stop(worker) == 0
    assert len(records(record, "done")) == 3
    assert "permission" not in (tmp_path / "worker.log").read_text().lower()


def test_only_an_operator_or_a_dashboard_quiets_or_stops_a_worker(
    secured: NatsServer, tmp_path: Path
) -> None:
    """A producer or a canceller asking a worker by its id to go quiet or stop, or asking the
    workers to install a schedule, is refused by the server; the dashboard's credentials do
    all of it."""
    url = secured.url
    provision(url)
    worker = start_worker(
        url, tmp_path / "record", tmp_path / "worker.log", module="perm_app", env=as_user("perm-worker")
    )

    async def scenario() -> None:
        async with Admin(role_app(url, "perm-dashboard"), role="dashboard") as admin:
            (entry,) = await wait_until_async(admin.workers, timeout=20, message="the worker's entry")
            for user in ("perm-producer", "perm-canceller"):
                async with role_session(url, user) as other:
                    conn = await _connect(other)
                    try:
                        for verb in ("quiet", "stop"):
                            await _refused(conn, f"jsw.perm.ask.worker.{entry.id}.{verb}")
                        # Nor may either have the workers install a schedule of its making.
                        await _refused(conn, "jsw.perm.ask.schedule.mine", b'{"task": "add", "every": 1}')
                    finally:
                        await conn.close()
            assert await admin.put_schedule("mine", "add", every=3600, args=[1, 2]) == "created"
            assert await admin.quiet_worker(entry.id)
            await wait_until_async(
                admin.workers, until=lambda found: found and found[0].quiet_since, timeout=10, message="quiet"
            )
            assert await admin.stop_worker(entry.id)

    try:
        asyncio.run(scenario())
        assert worker.wait(timeout=30) == 0  # it stopped by itself, cleanly
    finally:
        assert stop(worker) == 0


def test_a_queues_limits_change_only_through_a_worker_and_only_as_limits(
    secured: NatsServer, tmp_path: Path
) -> None:
    """The dashboard may ask the workers to change a queue's limits, and nothing more: it may
    not change a consumer itself (its filter and ack policy decide which jobs run and how
    often); a question that names anything but a declared queue's max_running and rate limit
    is refused by the worker, whose consumer stays as it was. A producer or a canceller may
    not ask at all."""
    url = secured.url
    provision(url)
    worker = start_worker(
        url, tmp_path / "record", tmp_path / "worker.log", module="perm_app", env=as_user("perm-worker")
    )

    async def consumer_config(queue: str) -> dict[str, object]:
        nc = await nats.connect(url, user=ADMIN[0], password=ADMIN[1])
        try:
            info = await nc.jetstream().consumer_info("JSW_PERM", queue)
            config: dict[str, object] = info.config.as_dict()
            return config
        finally:
            await nc.close()

    async def scenario() -> None:
        async with Admin(role_app(url, "perm-dashboard"), role="dashboard") as admin:
            await wait_until_async(admin.workers, timeout=20, message="the worker's entry")
            before = await consumer_config("default")
            conn = await Connection.open(admin.app.connect_options("dashboard", "attack"))
            try:
                # Its own consumer, or a change to the queue's: the server refuses both.
                spec = {"stream_name": "JSW_PERM", "config": {**before, "filter_subject": "jsw.perm.>"}}
                create = api_subject("CONSUMER.CREATE.JSW_PERM.default")
                await _refused(conn, create, json.dumps(spec).encode())
                await _refused(conn, api_subject("CONSUMER.DURABLE.CREATE.JSW_PERM.default"))
                # The question, bent: another field, another consumer, a value that is none.
                for queue, asked in (
                    ("default", {"filter_subject": "jsw.perm.>"}),
                    ("default", {"max_running": -1}),
                    ("default", {"max_running": 10**30}),
                    ("default", {"rate_limit": "0/s"}),
                    ("_jsw_final_x", {"max_running": 1}),
                    ("nosuch", {"max_running": 1}),
                ):
                    answer = await conn.nc.request(
                        f"jsw.perm.ask.limits.{queue}", json.dumps(asked).encode(), timeout=5
                    )
                    assert "error" in json.loads(answer.data), (queue, asked)
            finally:
                await conn.close()
            assert await consumer_config("default") == before
            for user in ("perm-producer", "perm-canceller"):
                async with role_session(url, user) as other:
                    conn = await _connect(other)
                    try:
                        await _refused(conn, "jsw.perm.ask.limits.default", b'{"max_running": 1}')
                    finally:
                        await conn.close()
            # What it may do, it does.
            assert await admin.set_queue_limits("default", max_running=4) == {"max_running": "4"}
            assert (await consumer_config("default"))["max_ack_pending"] == 4

    try:
        asyncio.run(scenario())
    finally:
        assert stop(worker) == 0


def test_a_worker_rewinds_only_the_relays_and_to_no_effect(secured: NatsServer, tmp_path: Path) -> None:
    """A worker may start the relays' consumers again from any message (how it hands out the
    delayed and fired jobs they passed after a failover), nothing more: a queue's consumer is
    refused (a rewound queue would run jobs again), and so is a producer. Rewinding the relays
    over and over while a delayed job waits moves it twice at most: it runs once and its
    waiter gets its result."""
    url, record = secured.url, tmp_path / "record"
    provision(url)
    worker = start_worker(url, record, tmp_path / "worker.log", module="perm_app", env=as_user("perm-worker"))
    relays = [
        f"$JS.API.CONSUMER.RESET.{where}" for where in ("JSW_PERM._jsw_later", "JSW_PERM_SCHED._jsw_fired")
    ]

    async def attack() -> None:
        async with role_session(url, "perm-producer") as producer:
            conn = await _connect(producer)
            try:
                for subject in relays:
                    await _refused(conn, subject, b'{"seq":1}')
            finally:
                await conn.close()
            delayed = await producer.tasks["add"].aapply((20, 22), countdown=1)
            async with role_session(url, "perm-worker") as rogue:
                conn = await Connection.open(rogue.connect_options("worker", "attack"))
                try:
                    await _refused(conn, "$JS.API.CONSUMER.RESET.JSW_PERM.default", b'{"seq":1}')
                    result = asyncio.ensure_future(delayed.aresult(timeout=20))
                    while not result.done():  # until the job ran: past its due time and its moves
                        for subject in relays:
                            answer = await request_json(conn, subject, {"seq": 1})
                            assert answer["reset_seq"] == 1, answer
                        await asyncio.wait({result}, timeout=0.05)
                    assert result.result() == 42
                finally:
                    await conn.close()

    try:
        asyncio.run(attack())
    finally:
        assert stop(worker) == 0
    assert [task for _, task, _ in records(record)] == ["add"]
