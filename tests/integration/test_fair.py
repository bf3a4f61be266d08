"""Fair queues on a real server with worker processes: one partition's backlog does not hold
up another's jobs beyond the stated bound; a job waiting for its turn shows as queued with
the reason and can be cancelled; the mover's lease passes to another worker when its holder
is killed."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jsworker import App, JobState
from jsworker._lifecycle.lookup import WAITING_TURN
from jsworker._limits.fair import READY
from jsworker._limits.partitions import LEASE_TTL
from jsworker._wire.headers import EXPECTED_LAST_SUBJECT_SEQ, MOVED, MSG_TTL
from jsworker.admin import Admin
from jsworker.testing import NatsCluster, NatsServer

from ..support import connected, wait_until
from .workers import APPS, start_worker, stop

sys.path.insert(0, str(APPS))
import fair_app


@pytest.fixture
def app(nats_server: NatsServer) -> Iterator[App]:
    fair_app.app.configure_connection([nats_server.url])
    yield fair_app.app
    fair_app.app.close()


def starts(record: Path) -> list[tuple[str, str]]:
    """(job id, account) of each start, in the order the worker started them."""
    lines = record.read_text().splitlines() if record.exists() else []
    return [(job_id, account) for _, job_id, account in (line.split() for line in lines)]


def test_a_late_partition_starts_within_the_bound_not_after_the_backlog(
    app: App, nats_server: NatsServer, tmp_path: Path
) -> None:
    record, log = tmp_path / "record", tmp_path / "log"
    fair_app.send.delay_many([("big",)] * 10_000)
    small = fair_app.send.delay_many([("small",)] * 10)
    concurrency = prefetch = 2
    worker = start_worker(nats_server.url, record, log, "-c", str(concurrency), module="fair_app")
    try:
        wait_until(
            lambda: sum(account == "small" for _, account in starts(record)) == 10,
            timeout=120,
            message="the small partition's 10 jobs",
        )
    finally:
        assert stop(worker) == 0
    order = starts(record)
    positions = [i for i, (_, account) in enumerate(order) if account == "small"]
    # Ahead of the small partition's first job: what waited in the queue, what the worker
    # had pulled, and the big partition's turn (2 partitions).
    bound = READY + prefetch + 2
    assert positions[0] <= bound, (positions, bound)
    # Then the partitions take turns: each later small job has one big job ahead of it.
    assert positions[-1] <= bound + 2 * 9, (positions, bound)
    assert {job_id for job_id, account in order if account == "small"} == {job.id for job in small}
    assert len({job_id for job_id, _ in order}) == len(order)  # each moved job ran once


def test_a_job_waiting_for_its_turn_is_queued_with_the_reason_and_can_be_cancelled(
    app: App, nats_server: NatsServer, tmp_path: Path
) -> None:
    record, log = tmp_path / "record", tmp_path / "log"
    waiting = fair_app.send.delay("a")
    status = waiting.status()
    assert (status.state, status.queue, status.task, status.reason) == (
        JobState.QUEUED,
        "emails",
        "send",
        WAITING_TURN,
    )

    async def queued() -> list[tuple[str, str, str | None]]:
        async with Admin(app) as admin:
            page = await admin.jobs(state="queued")
            return [(job.id, job.queue, job.reason) for job in page.items]

    # Listed among the queued jobs, with the reason.
    assert asyncio.run(queued()) == [(waiting.id, "emails", WAITING_TURN)]
    assert app.cancel(waiting.id)
    assert asyncio.run(queued()) == []

    async def purge() -> int:
        async with Admin(app) as admin:
            return await admin.purge_queue("emails")

    purged = fair_app.send.delay("b")
    assert asyncio.run(purge()) == 1  # a purge takes those waiting for their turn too
    assert purged.status().state is JobState.UNKNOWN
    assert waiting.status().state is JobState.CANCELLED
    assert not app.cancel(waiting.id)
    worker = start_worker(nats_server.url, record, log, module="fair_app")
    try:
        later, tidy = fair_app.send.delay("a"), fair_app.tidy.delay()
        wait_until(lambda: len(starts(record)) == 2, timeout=30, message="the two later jobs")
    finally:
        assert stop(worker) == 0
    assert sorted(starts(record)) == sorted([(later.id, "a"), (tidy.id, "tidy")])


@pytest.mark.slow
def test_another_worker_moves_the_jobs_once_the_movers_worker_is_killed(
    app: App, nats_server: NatsServer, tmp_path: Path
) -> None:
    record, log = tmp_path / "record", tmp_path / "log"
    first = start_worker(nats_server.url, record, log, module="fair_app")
    try:
        fair_app.send.delay("a")
        wait_until(lambda: len(starts(record)) == 1, timeout=30, message="a job moved and run")
    finally:
        first.kill()
        first.wait()
    second = start_worker(nats_server.url, record, log, module="fair_app")
    try:
        jobs = fair_app.send.delay_many([(account,) for account in ("a", "b") for _ in range(5)])
        ids = {job.id for job in jobs}
        # The dead worker's lease expires; the standing-by one takes it at its next look.
        wait_until(
            lambda: {job_id for job_id, _ in starts(record)} >= ids,
            timeout=LEASE_TTL * 2 + 10,
            message="the other 10",
        )
    finally:
        assert stop(second) == 0
    # Each moved and run once; the first job may run again, its ack lost with the killed worker.
    assert sorted(job_id for job_id, _ in starts(record) if job_id in ids) == sorted(ids)


@pytest.mark.slow
def test_a_fair_queue_moves_its_jobs_with_three_replicas(nats_cluster: NatsCluster, tmp_path: Path) -> None:
    """On a 3-node cluster with 3 replicas, as production runs: the mover reads the intake of a
    replicated work-queue stream (whose consumers the server wants with the stream's
    replicas), and every job of every partition is moved and runs once."""
    urls = ",".join(nats_cluster.urls)
    options = fair_app.app.options
    fair_app.app.configure_connection(nats_cluster.urls)
    fair_app.app.options = dataclasses.replace(options, replicas=3)
    record, log = tmp_path / "record", tmp_path / "log"
    try:
        jobs = fair_app.send.delay_many([(account,) for account in ("a", "b", "c") for _ in range(20)])
        worker = start_worker(urls, record, log, "--replicas", "3", module="fair_app")
        try:
            wait_until(lambda: len(starts(record)) == len(jobs), timeout=60, message="every job run")
        finally:
            assert stop(worker) == 0
    finally:
        fair_app.app.close()
        fair_app.app.options = options
    assert sorted(job_id for job_id, _ in starts(record)) == sorted(job.id for job in jobs)


async def _intake(url: str, app: App) -> dict[str, int]:
    """Messages in the fair queue's intake, by subject."""
    async with connected(url) as nc:
        info = await nc.jetstream().stream_info(
            app.namespace.stream, subjects_filter=app.namespace.intake_filter("emails")
        )
    return dict(info.state.subjects or {})


async def _leave_a_marker_alone(url: str, app: App) -> None:
    """What a mover leaves when it stops between deleting a moved job and deleting its
    marker: the marker stored behind the job as a move stores it, then the job deleted."""
    ((subject, _),) = (await _intake(url, app)).items()
    async with connected(url) as nc:
        js = nc.jetstream()
        job = await js.get_last_msg(app.namespace.stream, subject)
        assert job.seq is not None
        marker = {EXPECTED_LAST_SUBJECT_SEQ: str(job.seq), MOVED: "1", MSG_TTL: "10m"}
        await js.publish(subject, b"", headers=marker)
        await js.delete_msg(app.namespace.stream, job.seq)


def test_a_marker_left_behind_a_moved_job_goes_when_the_next_mover_catches_up(
    app: App, nats_server: NatsServer, tmp_path: Path
) -> None:
    """A marker stands behind a moved job until the job is deleted; alone, left by a mover
    that stopped between the two deletions, it would stay for its ten minutes, and the
    intake's reader with it. The next mover deletes it as it reads the intake."""
    fair_app.send.delay("a")
    asyncio.run(_leave_a_marker_alone(nats_server.url, app))
    worker = start_worker(nats_server.url, tmp_path / "record", tmp_path / "log", module="fair_app")
    try:
        wait_until(
            lambda: asyncio.run(_intake(nats_server.url, app)),
            until=lambda left: not left,
            timeout=30,
            message="the intake empty",
        )
    finally:
        assert stop(worker) == 0
    assert starts(tmp_path / "record") == []
