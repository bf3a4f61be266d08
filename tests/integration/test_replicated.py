"""Every feature on a three-node cluster with three replicas, as production runs: fair queues,
workflows, partition limits, rate limits, kept results and delayed jobs, each end to end with an
in-process worker. Their streams (the job stream, schedules, claims, tallies, rates, leases, the
records bucket) are all R3 here, so each feature meets what only a replicated stream does:
consumers the server wants with the stream's replicas, atomic batches and compare-and-set
writes through Raft, leaders that may sit on any node.

One cluster serves the module (forming one is the costly part); each test has an app of its
own, so their streams never meet.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter, defaultdict
from typing import Any

import pytest

from jsworker import App, current_job
from jsworker._core.queues import queue_status
from jsworker._limits.spec import parse_rate
from jsworker._wire.headers import MSG_ID, TASK
from jsworker.jetstream.connection import Connection
from jsworker.jetstream.message import OutMessage
from jsworker.jetstream.publish import Publisher
from jsworker.testing import NatsCluster
from jsworker.workflows import chain, chord, group

from ..support import most_in_any_second, wait_until_async
from .workers import in_process_worker

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def r3_app(name: str, cluster: NatsCluster, **options: Any) -> App:
    """An app whose streams are created with three replicas, given every node."""
    return App(name, cluster.urls, replicas=3, **options)


async def test_a_fair_queue_moves_and_runs_every_job_once(nats_cluster_module: NatsCluster) -> None:
    app = r3_app("rfair", nats_cluster_module)
    app.queue("emails", fair=True)
    ran: list[tuple[str, str]] = []

    @app.task(queue="emails", partition_key=lambda account, **_: account)
    async def send(account: str, n: int) -> None:
        ran.append((current_job().id, account))

    # One account's backlog first: the others must still get their turns.
    jobs = await send.adelay_many(
        [("big", i) for i in range(30)] + [(a, i) for a in ("b", "c") for i in range(5)]
    )
    async with in_process_worker(app, concurrency=2):
        await wait_until_async(lambda: len(ran) >= len(jobs), timeout=60, message="every fair job to run")
    assert Counter(job_id for job_id, _ in ran) == Counter(job.id for job in jobs)
    # Turns were taken: the last small account's job started before the big backlog ended.
    order = [account for _, account in ran]
    last_small = max(i for i, account in enumerate(order) if account != "big")
    assert last_small < len(order) - 1, order


async def test_workflows_chain_group_and_chord_complete_once(nats_cluster_module: NatsCluster) -> None:
    app = r3_app("rflow", nats_cluster_module, workflows=True)
    ran: Counter[str] = Counter()

    @app.task
    async def add(x: int, y: int) -> int:
        ran[f"add {x} {y}"] += 1
        return x + y

    @app.task
    async def double(x: int) -> int:
        ran[f"double {x}"] += 1
        return 2 * x

    @app.task(store_result=True)
    async def total(values: list[int]) -> int:
        ran["total"] += 1
        return sum(values)

    async with in_process_worker(app, concurrency=8):
        linked = await chain(add.s(1, 2), double.s(), double.s()).aapply()
        members = await group([double.s(i) for i in range(100, 105)]).aapply()
        gathered = await chord([double.s(i) for i in range(10, 20)], total.s()).aapply()
        assert await linked.aresult(timeout=60) == 12
        assert await members.aresult(timeout=60) == [200, 202, 204, 206, 208]
        assert await gathered.aresult(timeout=60) == sum(2 * i for i in range(10, 20))
    assert ran["total"] == 1  # the chord's callback, once
    assert ran["add 1 2"] == ran["double 3"] == ran["double 6"] == 1
    assert all(ran[f"double {i}"] == 1 for i in (*range(100, 105), *range(10, 20)))


async def test_a_partition_never_runs_two_jobs_at_once(nats_cluster_module: NatsCluster) -> None:
    app = r3_app("rpart", nats_cluster_module)
    runs: dict[str, list[tuple[float, float]]] = defaultdict(list)
    active: set[str] = set()
    side_by_side = asyncio.Event()

    @app.task(partition_key=lambda account, **_: account, max_running_per_partition=1)
    async def visit(account: str, n: int) -> None:
        begun = time.monotonic()
        active.add(account)
        # The first jobs hold their leases until one of every partition runs: then all go on.
        if len(active) == 3:
            side_by_side.set()
        await side_by_side.wait()
        active.discard(account)
        runs[account].append((begun, time.monotonic()))

    jobs = await visit.adelay_many([(account, i) for i in range(6) for account in ("a", "b", "c")])
    async with in_process_worker(app, concurrency=10):
        await wait_until_async(
            lambda: sum(map(len, runs.values())) >= len(jobs), timeout=60, message="every visit to run"
        )
    assert sum(map(len, runs.values())) == len(jobs)
    for account, spans in runs.items():
        ordered = sorted(spans)
        assert all(b[0] >= a[1] for a, b in itertools.pairwise(ordered)), f"partition {account} overlapped"
    # The limit is per partition: partitions ran side by side.
    everything = sorted(span for spans in runs.values() for span in spans)
    assert any(b[0] < a[1] for a, b in itertools.pairwise(everything))


async def test_a_rate_limit_holds_and_every_job_runs(nats_cluster_module: NatsCluster) -> None:
    app = r3_app("rrate", nats_cluster_module)
    rate = "10/s"
    started: list[float] = []

    @app.task(rate_limit=rate)
    async def report(n: int) -> None:
        started.append(time.monotonic())

    limit = parse_rate(rate)
    n = 3 * limit.count
    await report.adelay_many([(i,) for i in range(n)])
    async with in_process_worker(app, concurrency=20):
        await wait_until_async(lambda: len(started) >= n, timeout=60, message=f"{n} reports to start")
    assert len(started) == n
    assert most_in_any_second(started) <= limit.count + 2 * limit.burst, sorted(started)


async def test_kept_results_are_read_back(nats_cluster_module: NatsCluster) -> None:
    app = r3_app("rkept", nats_cluster_module)

    @app.task(store_result=True)
    async def square(x: int) -> dict[str, int]:
        return {"x": x, "square": x * x}

    async with in_process_worker(app, concurrency=10):
        jobs = await square.adelay_many([(i,) for i in range(20)])
        got = [await job.aresult(timeout=60) for job in jobs]
        # Read again by id, as another process holding only the id does.
        again = [await app.job(job.id).aresult(timeout=10) for job in jobs]
    assert got == again == [{"x": i, "square": i * i} for i in range(20)]


async def test_delayed_jobs_run_once_and_never_early(nats_cluster_module: NatsCluster) -> None:
    app = r3_app("rlater", nats_cluster_module)
    ran: list[tuple[str, float]] = []

    @app.task
    async def remind(n: int) -> None:
        ran.append((current_job().id, time.time()))

    async with in_process_worker(app):
        jobs = [await remind.aapply((i,), countdown=0.5 + 0.25 * i) for i in range(6)]
        await wait_until_async(lambda: len(ran) >= len(jobs), timeout=30, message="every delayed job to run")
    assert Counter(job_id for job_id, _ in ran) == Counter(job.id for job in jobs)
    due = {job.id: job.scheduled_for for job in jobs}
    early = [job_id for job_id, at in ran if (when := due[job_id]) is None or at < when.timestamp()]
    assert not early, f"started before they were due: {early}"


async def test_a_consumer_leader_change_voids_the_pulls_and_says_so(nats_cluster_module: NatsCluster) -> None:
    """The queue's consumer leader steps down while a worker's pull requests wait on it: the
    server voids them, the worker says so (``engine.requests_voided``, logged at info: a
    failover an operator sees) and pulls again, and the next job runs."""
    app = r3_app("rvoid", nats_cluster_module)
    ran: list[int] = []

    @app.task
    async def work(n: int) -> None:
        ran.append(n)

    await app.provision()
    async with in_process_worker(app) as worker:
        await work.adelay(1)
        await wait_until_async(lambda: ran == [1], timeout=20, message="a first job")
        conn = await app.connections.connection()
        await conn.nc.request("$JS.API.CONSUMER.LEADER.STEPDOWN.JSW_RVOID.default", b"{}", timeout=5)
        await wait_until_async(
            lambda: worker.counts["engine.requests_voided"], timeout=20, message="the pulls to be voided"
        )
        await work.adelay(2)
        await wait_until_async(lambda: ran == [1, 2], timeout=20, message="a job after the change")


async def test_the_same_job_enqueued_at_once_is_stored_once_and_refused_never(
    nats_cluster_module: NatsCluster,
) -> None:
    """Writes of one job id at the same moment: while the stream leader proposes the first,
    it answers the others "duplicate message id is in process" (10158), which is a retry's
    business, not a refusal. Each enqueue returns, one at a time or in bulk; the job is
    stored once, and only the write that stored it says it is not a duplicate."""
    app = r3_app("rsame", nats_cluster_module)

    @app.task
    async def once(i: int) -> None: ...

    try:
        await app.provision()
        for k in range(3):
            jobs = await asyncio.gather(*(once.aapply((k,), job_id=f"one-{k}") for _ in range(3)))
            assert {job.id for job in jobs} == {f"one-{k}"}
            assert sorted(job.duplicate for job in jobs) == [False, True, True]
        conn = await Connection.open(app.connect_options("producer"))
        try:
            subject = app.namespace.job_subject("default", once.name, "bulk")
            msg = OutMessage(subject, b"[9]", {MSG_ID: "bulk", TASK: once.name})
            stored = await Publisher(conn).publish_many([msg] * 3)
        finally:
            await conn.close()
        assert [s.duplicate for s in stored] == [False, True, True]
        assert len({s.seq for s in stored}) == 1
        (status,) = await queue_status(app)
        assert status.pending == 3 + 1
    finally:
        await app.aclose()
