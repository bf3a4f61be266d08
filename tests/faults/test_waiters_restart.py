"""Waiting for results survives the server: callers wait on ``aresult`` while the nats-server
is SIGKILLed and restarted on the same store, and each gets its own job's value.

The worker runs ``life_app`` (``apps/life_app.py``); each job ``hold(tag)`` runs until its own
gate opens and returns its tag, so which results exist before, during and after the outage is
decided by the test, never by a duration. What used to end a wait early, long before the
caller's own timeout: a read of the jobs bucket that failed (no answer while the server was
down, no responders while it settles) raised into the caller, or, made on reconnect, into the
client's reconnect, where it was lost along with the reads after it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
import pytest

from jsworker import Job
from jsworker.jetstream.connection import Connection
from jsworker.testing import NatsServer

from ..support import connected, wait_until_async
from .harness import Records, WorkerProc, Workers, app_module, wait_stream_empty

pytestmark = [pytest.mark.faults, pytest.mark.anyio]

T = TypeVar("T")

MODULE = "life_app"
STREAM = "JSW_LCY"
BUCKET = "KV_jsw_lcy_jobs"
JOBS = 200


@pytest.fixture
def life_app() -> Iterator[ModuleType]:
    """The lifecycle app module, as producers in this process use it; settings restored after."""
    yield from app_module(MODULE)


# -- helpers ------------------------------------------------------------------------------


async def open_gates(url: str, workers: Workers, names: list[str]) -> None:
    """Let the runs held on ``names`` finish: create each gate file (a run that starts later
    finds it), then announce each opening (a run already waiting hears it)."""
    for name in names:
        (workers.record.parent / f"gate-{name}").touch()
    async with connected(url) as nc:
        for name in names:
            await nc.publish(f"lcy-test.gate.{name}", b"")
        await nc.flush()


async def succeeded_in_bucket(url: str, job_ids: list[str]) -> int:
    """How many of ``job_ids`` have a record of success in the jobs bucket now (read over a
    connection of our own)."""
    done = 0
    async with connected(url) as nc:
        js = nc.jetstream()
        for job_id in job_ids:
            try:
                msg = await js.get_msg(BUCKET, subject=f"$KV.jsw_lcy_jobs.{job_id}")
            except nats.js.errors.NotFoundError:
                continue  # no record yet
            done += json.loads(msg.data or b"{}").get("state") == "succeeded"
    return done


async def wait_stored(url: str, job_ids: list[str]) -> None:
    await wait_until_async(
        lambda: succeeded_in_bucket(url, job_ids), until=lambda n: n == len(job_ids), timeout=30,
        message="the results to be stored",
    )  # fmt: skip


def elsewhere(work: Callable[..., T], *args: Any) -> T:
    """``work(*args)`` in another thread, this one blocked meanwhile (its event loop too)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(work, *args).result()


class BucketReads:
    """Counts the requests a connection makes of the jobs bucket by how they ended, and answers
    the next ``refuse`` of them with "no responders", as a server does while its stream has no
    leader yet (nats-py raises the same for a 503)."""

    def __init__(self, conn: Connection, monkeypatch: pytest.MonkeyPatch) -> None:
        self.conn = conn
        self.counts: Counter[str] = Counter()
        self.refuse = 0
        request = conn.nc.request

        async def counted(subject: str, *args: Any, **kwargs: Any) -> Any:
            if BUCKET not in subject:
                return await request(subject, *args, **kwargs)
            if self.refuse > 0:
                self.refuse -= 1
                self.counts["refused"] += 1
                raise nats.errors.NoRespondersError
            try:
                reply = await request(subject, *args, **kwargs)
            except BaseException:
                self.counts["failed"] += 1
                raise
            self.counts["answered"] += 1
            return reply

        monkeypatch.setattr(conn.nc, "request", counted)


async def start_held(
    url: str, life_app: ModuleType, workers: Workers, records: Records, tags: list[str]
) -> tuple[WorkerProc, dict[str, Job]]:
    """A worker, and one ``hold(tag)`` job per tag, every run started and held on its gate."""
    life_app.app.servers = [url]
    worker = workers.start(url, "w", "-c", str(3 * len(tags)), module=MODULE)
    await asyncio.to_thread(worker.wait_started)
    jobs = {tag: await life_app.hold.adelay(tag) for tag in tags}
    ids = {job.id for job in jobs.values()}
    await wait_until_async(
        lambda: {r.job_id for r in records.of("start")} >= ids, timeout=30, message="every run to start"
    )
    return worker, jobs


class Waiters:
    """Callers of ``aresult(timeout=patience)``, one per job, started when the test says."""

    def __init__(self, jobs: dict[str, Job], patience: float) -> None:
        self.jobs = jobs
        self.patience = patience
        self.started: dict[str, float] = {}
        self.tasks: dict[str, asyncio.Task[Any]] = {}

    def start(self, tags: list[str]) -> None:
        for tag in tags:
            self.started[tag] = time.monotonic()
            self.tasks[tag] = asyncio.ensure_future(self.jobs[tag].aresult(timeout=self.patience))

    async def check(self, test: str, reads: BucketReads, **figures: Any) -> None:
        """Every waiter returned its own job's value (none raised), before its timeout; prints
        the figures, with the bucket reads made until the last waiter returned."""
        outcomes = await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        ended = time.monotonic()
        wrong = {tag: got for tag, got in zip(self.tasks, outcomes, strict=True) if got != tag}
        errors = Counter(type(got).__name__ for got in wrong.values() if isinstance(got, BaseException))
        longest = max(ended - t for t in self.started.values())
        summary = {
            "test": test,
            "waiters": len(self.tasks),
            "right": len(self.tasks) - len(wrong),
            "errors": dict(errors),
            "longest_wait_s": round(longest, 3),
            "reads": dict(reads.counts),
            **figures,
        }
        print(json.dumps(summary))  # noqa: T201 - the figures this suite reports (pytest -s)
        assert not wrong, f"{len(wrong)} of {len(self.tasks)} waiters did not get their value: " + "; ".join(
            f"{tag}: {got!r}" for tag, got in list(wrong.items())[:5]
        )
        assert longest < self.patience, "a waiter may have waited out its timeout"


# -- tests --------------------------------------------------------------------------------


async def start_waiting(
    life_app: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    jobs: dict[str, Job],
    tags: list[str],
    patience: float,
) -> tuple[BucketReads, Waiters]:
    """Waiters for the jobs of ``tags``, once each has read the bucket a first time, and the
    count of the producer's bucket reads."""
    conn = await life_app.app.producer.connection()
    reads = BucketReads(conn, monkeypatch)
    waiters = Waiters(jobs, patience=patience)
    waiters.start(tags)
    await wait_until_async(
        lambda: reads.counts["answered"], until=lambda n: n >= len(tags), timeout=30,
        message="the first reads of the waiters",
    )  # fmt: skip
    return reads, waiters


@pytest.mark.timeout(180)
async def test_waiters_ride_out_a_server_sigkill_and_restart(
    nats_server: NatsServer,
    life_app: ModuleType,
    workers: Workers,
    records: Records,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """200 waiters with a 60 s timeout, of three kinds: ``before`` waits since before the kill
    for a result that comes after the restart; ``during`` starts while the server is down, for a
    result that comes after the restart; ``stored`` starts while the server is down, for a
    result stored before the kill (readable only from the bucket once the server is back). The
    outage lasts until every read made during it has failed. Every waiter returns its own
    job's value; none raises."""
    url = nats_server.url
    tags = [f"wr{i}" for i in range(JOBS)]
    worker, jobs = await start_held(url, life_app, workers, records, tags)
    stored, before, during = tags[: JOBS // 3], tags[JOBS // 3 : 2 * JOBS // 3], tags[2 * JOBS // 3 :]
    # Stored before anyone waits: no waiter's subscription sees these records go by.
    await open_gates(url, workers, stored)
    await wait_stored(url, [jobs[tag].id for tag in stored])

    reads, waiters = await start_waiting(life_app, monkeypatch, jobs, before, patience=60.0)
    conn = reads.conn
    assert not any(task.done() for task in waiters.tasks.values())

    nats_server.kill()
    killed = time.monotonic()
    await wait_until_async(
        lambda: not conn.is_connected, timeout=30, message="the producer to lose the server"
    )
    await asyncio.to_thread(worker.wait_logged, "worker.disconnected")
    waiters.start(stored + during)
    # The outage lasts until every read made during it has failed (not merely waited).
    await wait_until_async(
        lambda: reads.counts["failed"], until=lambda n: n >= len(stored) + len(during), timeout=30,
        message="every read made while the server is down to fail",
    )  # fmt: skip
    await asyncio.to_thread(nats_server.restart)
    back = time.monotonic()

    # The held runs hear their gates on the worker's connection: open them once that is back.
    await asyncio.to_thread(worker.wait_logged, "worker.reconnected")
    await open_gates(url, workers, before + during)
    await waiters.check("waiters_server_sigkill_restart", reads, downtime_s=round(back - killed, 3))
    assert worker.alive(), worker.tail()
    await life_app.app.aclose()


@pytest.mark.timeout(120)
async def test_a_failed_read_on_reconnect_is_made_again(
    nats_server: NatsServer,
    life_app: ModuleType,
    workers: Workers,
    records: Records,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """50 waiters (30 s timeout) wait since before the kill; every result is stored (and every
    job acked) after the restart but before the producer is back, so only the reads made on
    reconnect can find them, and the first ten of those get "no responders", as from a server
    whose stream has no leader yet. Those reads are made again: every waiter returns its value."""
    url = nats_server.url
    tags = [f"rr{i}" for i in range(50)]
    worker, jobs = await start_held(url, life_app, workers, records, tags)
    reads, waiters = await start_waiting(life_app, monkeypatch, jobs, tags, patience=30.0)
    conn = reads.conn

    nats_server.kill()
    await wait_until_async(
        lambda: not conn.is_connected, timeout=30, message="the producer to lose the server"
    )
    # From here until the results are stored this thread does not yield to its event loop,
    # so the producer's connection cannot come back: the records reach no subscription.
    nats_server.restart()
    worker.wait_logged("worker.reconnected")
    elsewhere(asyncio.run, open_gates(url, workers, tags))
    elsewhere(asyncio.run, wait_stored(url, [job.id for job in jobs.values()]))
    # Every job acked: no run (a redelivered one) can store a record after this.
    elsewhere(wait_stream_empty, url, 30, STREAM)
    assert not conn.is_connected
    reads.refuse = 10
    await wait_until_async(lambda: conn.is_connected, timeout=30, message="the producer to reconnect")

    await waiters.check("waiters_read_refused_on_reconnect", reads)
    assert reads.counts["refused"] == 10
    assert worker.alive(), worker.tail()
    await life_app.app.aclose()
