"""Final-state handlers (``App(final_states=True)``, ``@app.on_final_state``) on a real server
and worker: every job's final state is heard, wherever the job ended, and a handler that
fails hears it again."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from pathlib import Path

import pytest

from jsworker import App, ConfigurationError, JobState, JobStatus, PermissionDeniedError, Reject
from jsworker._lifecycle.state import JobRecord
from jsworker.jetstream.api import api_subject, request_json
from jsworker.jetstream.connection import Connection
from jsworker.testing import NatsServer

from ..support import wait_until_async
from .secured import as_user, provision, role_session
from .workers import in_process_worker, start_worker, stop


def tracked_app(url: str) -> tuple[App, dict[str, list[JobState]]]:
    """An app whose handler keeps, by job id, each final state it heard (a tracking table)."""
    app = App("finals", url, final_states=True, max_retries=0)
    heard: dict[str, list[JobState]] = defaultdict(list)
    failing_once = {"flaky-handler"}

    @app.on_final_state("table")
    async def table(status: JobStatus) -> None:
        if status.id in failing_once:
            failing_once.discard(status.id)  # a database failing over: heard again later
            raise RuntimeError("table unavailable")
        heard[status.id].append(status.state)

    @app.task
    async def work(n: int) -> int:
        return n

    @app.task
    async def refuse() -> None:
        raise Reject("refused on purpose")

    return app, heard


@pytest.mark.anyio
async def test_every_final_state_is_heard_wherever_the_job_ended(nats_server: NatsServer) -> None:
    app, heard = tracked_app(nats_server.url)
    work, refuse = app.tasks["work"], app.tasks["refuse"]
    # Ended before any worker received them: cancelled while delayed and while queued, and
    # one expired before a worker took it.
    delayed = await work.aapply(args=(1,), countdown=600, job_id="cancelled-delayed")
    queued = await work.aapply(args=(2,), job_id="cancelled-queued")
    assert await app.acancel(delayed.id) and await app.acancel(queued.id)
    stale = await work.aapply(args=(3,), job_id="expired", expires=0.2)
    deadline = time.time() + 0.3
    await wait_until_async(lambda: time.time() > deadline, timeout=5, message="the job's expiry to pass")
    expected = {
        "cancelled-delayed": JobState.CANCELLED,
        "cancelled-queued": JobState.CANCELLED,
        stale.id: JobState.EXPIRED,
    }
    async with in_process_worker(app):
        # Run by the worker: a first success with no result kept, a dead letter, and a success
        # whose handler fails once.
        for i in range(20):
            job = await work.adelay(i)
            expected[job.id] = JobState.SUCCEEDED
        expected[(await refuse.adelay()).id] = JobState.FAILED
        expected[(await work.aapply(args=(7,), job_id="flaky-handler")).id] = JobState.SUCCEEDED
        await wait_until_async(lambda: set(heard) >= set(expected), timeout=30, message="every final state")
    assert {job_id: states[-1] for job_id, states in heard.items()} == expected
    assert heard["flaky-handler"] == [JobState.SUCCEEDED]  # its failed call counted nothing


@pytest.mark.anyio
async def test_a_handler_started_later_hears_what_ended_meanwhile(nats_server: NatsServer) -> None:
    """The consumer is durable: jobs that ended while no process ran the handler are heard
    once one does."""
    app, heard = tracked_app(nats_server.url)
    worker_only = App("finals", nats_server.url, final_states=True, max_retries=0)

    @worker_only.task
    async def work(n: int) -> int:
        return n

    # A worker of code without the handler leaves its records for it.
    async with in_process_worker(worker_only):
        ids = [(await work.adelay(i)).id for i in range(5)]

        async def all_ended() -> bool:
            states = [(await worker_only.astatus(i)).state for i in ids]
            return all(state is JobState.SUCCEEDED for state in states)

        await wait_until_async(all_ended, timeout=30, message="the jobs to end")
    await app.provision()  # the provisioning step makes the handler's consumer
    async with in_process_worker(app):
        await wait_until_async(lambda: set(heard) >= set(ids), timeout=30, message="the jobs ended before")
    assert all(heard[i] == [JobState.SUCCEEDED] for i in ids)


def test_a_handler_needs_final_states_kept() -> None:
    app = App("finals-off", "nats://127.0.0.1:1")
    with pytest.raises(ConfigurationError, match=r"needs App\(final_states=True\)"):
        app.on_final_state("table")
    kept = App("finals-on", "nats://127.0.0.1:1", final_states=True)
    kept.on_final_state("table")(lambda status: None)
    with pytest.raises(ConfigurationError, match="declared already"):
        kept.on_final_state("table")
    with pytest.raises(ConfigurationError, match="invalid final-state handler name"):
        kept.on_final_state("no.dots")


def test_final_state_grants_cannot_be_misused(secured: NatsServer, tmp_path: Path) -> None:
    """With the printed credentials a worker hands records to the handler and nothing more:
    it cannot make a consumer on the jobs bucket (one pushing records into another app's
    subjects would make it a proxy), nor may a producer pull or acknowledge the handler's
    records (blinding the table) or store a record of its own for it to hear. A worker that
    finds the handler's consumer missing stops, naming the provisioning step."""
    url, record = secured.url, tmp_path / "record"
    provision(url, "perm_app")  # the app's streams, not yet the handler's consumer
    early = start_worker(
        url, record, tmp_path / "early.log", module="perm_final_app", env=as_user("perm-worker")
    )
    assert early.wait(timeout=60) != 0
    assert (
        "consumer _jsw_final_table of stream KV_jsw_perm_jobs does not exist"
        in (tmp_path / "early.log").read_text()
    )
    provision(url, "perm_final_app")
    worker = start_worker(
        url, record, tmp_path / "worker.log", module="perm_final_app", env=as_user("perm-worker")
    )

    async def scenario() -> None:
        async with role_session(url, "perm-worker") as as_worker:
            conn = await Connection.open(as_worker.connect_options("worker", "attack"))
            try:
                push = {"ack_policy": "none", "deliver_subject": "jsw.other.q.default.add"}
                for verb, tail in (("CONSUMER.CREATE", ".evil"), ("CONSUMER.DURABLE.CREATE", ".evil")):
                    with pytest.raises(PermissionDeniedError):
                        await request_json(
                            conn,
                            api_subject(verb, "KV_jsw_perm_jobs") + tail,
                            {"stream_name": "KV_jsw_perm_jobs", "config": {"durable_name": "evil", **push}},
                        )
            finally:
                await conn.close()
        async with role_session(url, "perm-producer") as producer:
            conn = await Connection.open(producer.connect_options("producer", "attack"))
            try:
                with pytest.raises(PermissionDeniedError):
                    await request_json(
                        conn,
                        api_subject("CONSUMER.MSG.NEXT", "KV_jsw_perm_jobs") + "._jsw_final_table",
                        {"batch": 1},
                    )
                forged = JobRecord(JobState.SUCCEEDED, "default", "add", seq=1).encode()
                with pytest.raises(PermissionDeniedError):
                    await conn.nc.request("$KV.jsw_perm_jobs.forged", forged, timeout=5)
            finally:
                await conn.close()
            job = await producer.tasks["add"].adelay(1, 2)
        await wait_until_async(
            lambda: f"final {job.id} succeeded" in (record.read_text() if record.exists() else ""),
            timeout=30,
            message="the handler to hear the job",
        )
        assert "forged" not in record.read_text()

    try:
        asyncio.run(scenario())
    finally:
        stop(worker)
