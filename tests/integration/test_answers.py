"""Workers answer only their own app's inboxes: a question whose reply subject an attacker chose
(another app's job record, claim or lease, nats-py's shared inbox) is dropped unhandled, with
the credentials ``jsworker permissions`` prints, on a real server with two apps."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
from nats.aio.msg import Msg

from jsworker.jetstream.connection import Connection
from jsworker.testing import NatsServer

from ..support import wait_until_async
from .secured import ADMIN, as_user, provision, role_app
from .workers import records, scrape, start_metrics_worker, stop, value, worker_env

# Subjects a worker's answer must never land on, whoever asks.
VICTIMS = (
    "$KV.jsw_other_jobs.victim",  # another app's job record: its result would be gone
    "jsw.other.claim.victim.1700000000000",  # another app's claim: its tick dropped as a duplicate
    "jsw.other.lease.default.fair.0",  # another app's fair-queue mover lease: held forever
    "jsw.perm.lease.gated.p",  # the app's own partition lease, which only workers write
    "_INBOX.shared",  # nats-py's shared inbox space, which any client may read
)


def _refused(port: int) -> float:
    return value(scrape(port), "jsworker_questions_refused_total", question="ask")


def test_a_question_is_answered_only_in_the_askers_inbox(secured: NatsServer, tmp_path: Path) -> None:
    """A producer's status questions and a canceller's cancel, each with a victim's subject as
    its reply subject: nothing is published there, the cancel is not carried out, each is
    counted and logged as refused; the same questions asked the normal way are answered."""
    url, gate, log, record = secured.url, tmp_path / "gate", tmp_path / "worker.log", tmp_path / "record"
    env = {**worker_env(url, record), **as_user("perm-worker")}
    provision(url)
    worker, port = start_metrics_worker(env, log, "perm_app")
    assert _refused(port) == 0

    async def scenario() -> None:
        observer = await nats.connect(url, user=ADMIN[0], password=ADMIN[1])
        landed: list[str] = []

        async def seen(msg: Msg) -> None:
            landed.append(msg.subject)

        for victim in VICTIMS:
            await observer.subscribe(victim, cb=seen)
        producer = role_app(url, "perm-producer")
        canceller = role_app(url, "perm-canceller")
        try:
            job = await producer.tasks["hold"].adelay(str(gate))
            # Running: the worker answers questions (it listens before it takes its first job).
            await wait_until_async(
                lambda: job.id in {j for j, _, _ in records(record, "started")}, timeout=20, message="the job"
            )
            asking = await Connection.open(producer.connect_options("producer", "attack"))
            cancelling = await Connection.open(canceller.connect_options("canceller", "attack"))
            try:
                for victim in VICTIMS:
                    await asking.nc.publish(f"jsw.perm.ask.status.{job.id}", b"", reply=victim)
                    await cancelling.nc.publish(f"jsw.perm.ask.cancel.{job.id}", b"", reply=victim)
                await asking.nc.flush()
                await cancelling.nc.flush()
            finally:
                await asking.close()
                await cancelling.close()
            await wait_until_async(
                lambda: landed or _refused(port) == 2 * len(VICTIMS),
                timeout=20,
                message="every question with a foreign reply subject refused",
            )
            await observer.flush()
            assert landed == []
            assert "question.refused" in log.read_text()
            # The questions asked the normal way are answered: the job is there, not cancelled.
            assert (await producer.astatus(job.id)).seq == job.seq
            gate.touch()
            assert await job.aresult(timeout=20) == "real"
        finally:
            await producer.aclose()
            await canceller.aclose()
            await observer.close()

    try:
        asyncio.run(scenario())
    finally:
        gate.touch()  # a failed assertion must not leave the held job keeping the worker from stopping
        assert stop(worker) == 0
