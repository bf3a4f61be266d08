"""Per-partition limits with worker processes on a real server: one job at a time per
partition across processes while partitions run side by side; a killed worker's lease
expires and its partition goes on; a broken partition key dead-letters the job."""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from jsworker import App, JobState
from jsworker._core.layout import LEASES_MAX_AGE
from jsworker._limits.partitions import LEASE_TTL, release_lease, renew_lease, take_lease
from jsworker._limits.spec import partition_token
from jsworker.admin import Admin
from jsworker.jetstream.limits_stream import LimitsStream
from jsworker.jetstream.stored import write
from jsworker.testing import NatsServer

from ..support import connected, wait_until, wait_until_async
from .workers import APPS, start_worker, stop

sys.path.insert(0, str(APPS))
import partition_app


@pytest.fixture
def app(nats_server: NatsServer) -> Iterator[App]:
    partition_app.app.configure_connection([nats_server.url])
    yield partition_app.app
    partition_app.app.close()


def spans(record: Path) -> dict[str, list[tuple[float, float]]]:
    """(begin, end) of each finished run, by partition."""
    begun: dict[str, float] = {}
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for line in record.read_text().splitlines() if record.exists() else []:
        event, job_id, account, _pid, _attempt, at = line.split()
        if event == "begin":
            begun[job_id] = float(at)
        elif event == "end" and job_id in begun:
            out[account].append((begun[job_id], float(at)))
    return out


def overlap(runs: list[tuple[float, float]]) -> bool:
    ordered = sorted(runs)
    return any(b[0] < a[1] for a, b in itertools.pairwise(ordered))


@pytest.mark.slow
def test_one_job_at_a_time_per_partition_across_two_processes(
    app: App, nats_server: NatsServer, tmp_path: Path
) -> None:
    record, log = tmp_path / "record", tmp_path / "log"
    partition_app.visit.delay_many([(account, 0.3) for account in ("a", "b", "c") for _ in range(10)])
    procs = [start_worker(nats_server.url, record, log, "-c", "10", module="partition_app") for _ in range(2)]
    try:
        wait_until(lambda: sum(map(len, spans(record).values())) == 30, timeout=60, message="30 runs")
    finally:
        for proc in procs:
            stop(proc)
    runs = spans(record)
    assert not any(overlap(r) for r in runs.values())  # never two of one partition at once
    everything = [span for r in runs.values() for span in r]
    assert overlap(everything)  # while partitions ran side by side


@pytest.mark.slow
def test_a_killed_workers_partition_goes_on_once_its_lease_expires(
    app: App, nats_server: NatsServer, tmp_path: Path
) -> None:
    record, log, gate = tmp_path / "record", tmp_path / "log", tmp_path / "gate"
    first = start_worker(nats_server.url, record, log, module="partition_app")
    partition_app.visit.delay("a", 0, str(gate))  # held until the gate exists
    wait_until(
        lambda: "begin" in (record.read_text() if record.exists() else ""), timeout=30, message="a start"
    )
    first.kill()
    first.wait()
    gate.touch()
    partition_app.visit.delay("a", 0)
    second = start_worker(nats_server.url, record, log, module="partition_app")
    try:
        # The second job waits for the dead worker's lease; the first comes back after its
        # ack_wait and waits too. Both finish once the lease has expired.
        wait_until(
            lambda: len(spans(record)["a"]) == 2, timeout=LEASE_TTL + 60, message="partition a going on"
        )
    finally:
        stop(second)
    assert not overlap(spans(record)["a"])


def test_a_job_waiting_for_its_partition_shows_queued_with_the_reason(
    app: App, nats_server: NatsServer, tmp_path: Path
) -> None:
    record, log, gate = tmp_path / "record", tmp_path / "log", tmp_path / "gate"

    async def listed() -> dict[str, dict[str, str | None]]:
        async with Admin(app) as admin:
            return {
                state: {job.id: job.reason for job in (await admin.jobs(state=state)).items}
                for state in ("running", "reserved")
            }

    proc = start_worker(nats_server.url, record, log, module="partition_app")
    try:
        holding = partition_app.visit.delay("a", 0, str(gate))
        wait_until(lambda: "begin" in (record.read_text() if record.exists() else ""), timeout=30)
        waiting = partition_app.visit.delay("a", 0)
        status = wait_until(
            waiting.status, until=lambda s: s.reason is not None, timeout=30, message="held back"
        )
        reason = "held back by the partition limits of task visit"
        assert (status.state, status.reason) == (JobState.QUEUED, reason)
        # Listed so too: reserved, apart from the running one.
        assert asyncio.run(listed()) == {"running": {holding.id: None}, "reserved": {waiting.id: reason}}
        assert holding.status().state is JobState.RUNNING
        gate.touch()
        wait_until(lambda: len(spans(record)["a"]) == 2, timeout=30, message="both runs")
    finally:
        gate.touch()
        assert stop(proc) == 0


def test_a_broken_partition_key_dead_letters_the_job(
    app: App, nats_server: NatsServer, tmp_path: Path
) -> None:
    from .workers import cli

    partition_app.misfiled.delay("dict")
    partition_app.misfiled.delay("boom")
    partition_app.visit.delay("z", 0)
    record, log = tmp_path / "record", tmp_path / "log"
    proc = start_worker(nats_server.url, record, log, module="partition_app")
    try:
        wait_until(lambda: len(spans(record)["z"]) == 1, timeout=30, message="the worker to go on")

        def letters() -> str:
            return cli(nats_server.url, "dlq", "list", "partition_app", "--json").stdout

        def misfiled() -> int:
            return sum('"misfiled"' in line for line in letters().splitlines())

        wait_until(lambda: misfiled() == 2, timeout=30, message="two dead letters")
    finally:
        stop(proc)
    shown = letters()
    assert "partition_key must return a string" in shown and "partition_key raised ZeroDivisionError" in shown


@pytest.mark.anyio
@pytest.mark.slow
async def test_ten_thousand_partitions_all_run_and_leave_no_lease(nats_server: NatsServer) -> None:
    from .workers import in_process_worker

    app = App("manyparts", nats_server.url)
    ran: set[str] = set()

    @app.task(partition_key=lambda tenant, **_: tenant, max_running_per_partition=1)
    async def touch(tenant: str) -> None:
        ran.add(tenant)

    await touch.adelay_many([(f"tenant-{i}",) for i in range(10_000)])
    await app.aclose()
    async with in_process_worker(app, concurrency=200):
        await wait_until_async(lambda: len(ran) == 10_000, timeout=180, message="10,000 partitions")
        conn = await app.connections.connection()
        leases = LimitsStream(conn, app.namespace.leases_stream)
        await wait_until_async(leases.count, until=lambda n: n == 0, timeout=30, message="no lease left")


def test_a_lease_message_no_holder_wrote_holds_nothing(
    app: App, nats_server: NatsServer, tmp_path: Path
) -> None:
    """A message without a time to live on a partition's lease subject (what a worker's answer
    aimed there once left) neither holds the partition nor stays: the partition's job runs at
    once, and the leases stream keeps nothing past its max age."""

    async def plant() -> None:
        nc = await nats.connect(nats_server.url)
        try:
            await app.provision()
            subject = f"jsw.parted.lease.visit.{partition_token('a')}.0"
            await nc.jetstream().publish(subject, b"not a holding")
            info = await nc.jetstream().stream_info(app.namespace.leases_stream)
            assert info.config.max_age == LEASES_MAX_AGE
        finally:
            await nc.close()

    asyncio.run(plant())
    record, log = tmp_path / "record", tmp_path / "log"
    partition_app.visit.delay("a", 0)
    proc = start_worker(nats_server.url, record, log, module="partition_app")
    try:
        wait_until(lambda: len(spans(record)["a"]) == 1, timeout=LEASE_TTL, message="partition a's job")
    finally:
        stop(proc)


@pytest.mark.anyio
async def test_a_job_waits_for_its_lease_while_the_leases_stream_is_down(nats_server: NatsServer) -> None:
    """The leases' stream gone (what a leader election looks like to a worker: no responders):
    a job of a partition-limited task waits held back, as for a busy partition, instead of
    ending in an internal error; once the stream is back it runs, once, at its first attempt."""
    import structlog

    from .workers import in_process_worker

    app = App("downparts", nats_server.url)
    attempts: list[int] = []

    @app.task(partition_key=lambda tenant, **_: tenant, max_running_per_partition=1)
    async def touch(tenant: str) -> None:
        from jsworker import current_job

        attempts.append(current_job().attempt)

    with structlog.testing.capture_logs() as logged:
        async with in_process_worker(app):
            async with connected(nats_server.url) as nc:
                await nc.jetstream().delete_stream(app.namespace.leases_stream)
            job = await touch.adelay("a")
            await wait_until_async(
                lambda: [e for e in logged if e["event"] == "partition.lease_unreadable"],
                timeout=10,
                message="the lease tried while its stream is gone",
            )
            assert (await app.astatus(job.id)).state is JobState.QUEUED  # held back
            await app.provision()
            await wait_until_async(lambda: attempts, timeout=20, message="the job to run")
    assert attempts == [1]
    assert not [e for e in logged if e["event"] == "job.internal_error"]


@pytest.mark.anyio
async def test_a_renewal_stored_without_an_answer_keeps_the_lease(nats_server: NatsServer) -> None:
    """A renewal the server stored but never answered (a slow or electing server) leaves the
    holder's idea of its lease's message behind. The next renewal finds the holding of its own
    there and goes on holding the lease instead of taking it for lost (no other holder can take
    it meanwhile), and the release frees it."""
    app = App("renewals", nats_server.url)

    @app.task(partition_key=lambda tenant, **_: tenant, max_running_per_partition=1)
    async def touch(tenant: str) -> None: ...

    await app.provision()
    conn = await app.connections.connection()
    leases = LimitsStream(conn, app.namespace.leases_stream)
    subject = f"jsw.{app.namespace.app}.lease.touch.{partition_token('t1')}.0"
    try:
        lease = await take_lease(leases, subject)
        assert lease is not None
        # The renewal the holder sent, stored; its answer never came, so lease.seq stays.
        await write(conn, subject, b"", lease.held, expect_last=lease.seq)
        assert await renew_lease(conn, lease)
        last = await leases.last(subject)
        assert last is not None and last.seq == lease.seq
        assert await take_lease(leases, subject) is None  # held: nobody else takes it
        await release_lease(conn, lease)
        assert await take_lease(leases, subject) is not None  # given back: free again
    finally:
        await app.aclose()
