"""Partitioned job streams under real worker processes: many jobs over four partitions run
once each, and a killed leader of one partition's stream stalls that partition alone."""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from types import ModuleType

import pytest

from jsworker import App
from jsworker._wire.names import partition_of
from jsworker.testing import NatsCluster, NatsServer

from ..support import UNSETTLED, stream_messages, wait_until
from .harness import (
    Records,
    Workers,
    app_module,
    leaders,
    longest_gap,
    move_leaders,
    summarize,
    worker_connections,
)

pytestmark = pytest.mark.faults

MODULE = "parted_app"
STREAMS = ["JSW_PRT", "JSW_PRT_P1", "JSW_PRT_P2", "JSW_PRT_P3"]


@pytest.fixture
def parted_app() -> Iterator[ModuleType]:
    """The partitioned app module as the producer in this process uses it."""
    yield from app_module(MODULE)


def _partition(job_id: str) -> int:
    return partition_of(job_id, len(STREAMS))


def _wait_all_empty(urls: str | list[str], timeout: float) -> None:
    """Every partition's stream holds nothing: each job was acknowledged."""
    wait_until(
        lambda: [stream_messages(urls, s) for s in STREAMS],
        until=lambda held: not any(held),
        timeout=timeout,
        interval=0.2,
        message="every partition's stream to be empty",
        ignore=UNSETTLED,
    )


async def _provision(app: App) -> None:
    try:
        await app.provision()
    finally:
        await app.aclose()


def test_fifty_thousand_jobs_over_four_partitions_run_once_each(
    nats_server: NatsServer, parted_app: ModuleType, workers: Workers, records: Records
) -> None:
    """50,000 jobs enqueued over four partitions, then three worker processes: every
    partition holds a share, each job runs once, and every worker takes part."""
    app = parted_app.app
    app.servers = [nats_server.url]
    jobs = parted_app.work.delay_many([(i, 0.0) for i in range(50_000)])
    held = [stream_messages(nats_server.url, s) for s in STREAMS]
    # A share each: 12,500 on average, far from empty.
    assert sum(held) == 50_000 and min(held) > 10_000, held
    started = [workers.start(nats_server.url, f"w{i}", "-c", "64", module=MODULE) for i in range(3)]
    wait_until(
        lambda: len(records.done_ids()), until=lambda n: n >= 50_000, timeout=240, message="every job to run"
    )
    _wait_all_empty(nats_server.url, timeout=60)
    done = records.counts("done")
    summary = summarize("partitions_fifty_thousand", (j.id for j in jobs), records, [], partitions=held)
    assert summary["lost"] == 0 and summary["duplicates"] == 0, summary
    assert set(done.values()) == {1}
    by_worker = Counter(r.pid for r in records.of("done"))
    assert {w.pid for w in started} == set(by_worker), by_worker


def test_a_killed_partition_leader_stalls_only_its_partition(
    nats_cluster: NatsCluster, parted_app: ModuleType, workers: Workers, records: Records
) -> None:
    """On a three-node R3 cluster, the node leading partition 1's stream (and only it) is
    killed while the workers, connected to the other two nodes, work a backlog in every
    partition: the other partitions go on without a pause, partition 1 resumes after its
    election, and no job is lost."""
    urls = list(nats_cluster.urls)
    app = parted_app.app
    app.servers = urls[1:]
    app.configure_options(replicas=3)
    asyncio.run(_provision(app))
    jobs = parted_app.work.delay_many([(i, 40.0) for i in range(6_000)])
    # Partition 1's stream and consumer lead from n1, every other partition's from n2.
    for k, stream in enumerate(STREAMS):
        move_leaders(urls, stream, "default", "n1" if k == 1 else "n2")
    for i in range(2):
        workers.start(urls[1:], f"w{i}", "-c", "16", module=MODULE, env={"JSWORKER_REPLICAS": "3"})
    for worker in workers.started:
        worker.wait_started()
    assert worker_connections(nats_cluster, "prt")[0] == 0
    wait_until(
        lambda: len(records.done_ids()), until=lambda n: n >= 500, timeout=60, message="the work to start"
    )
    killed_at = time.monotonic()
    nats_cluster.nodes[0].kill()
    wait_until(
        lambda: len(records.done_ids()), until=lambda n: n >= 6_000, timeout=180, message="every job to run"
    )
    _wait_all_empty(urls[1:], timeout=60)
    times: defaultdict[int, list[float]] = defaultdict(list)
    for r in records.of("done"):
        times[_partition(r.job_id)].append(r.at)
    gaps = {k: round(longest_gap(ts, after=killed_at), 3) for k, ts in sorted(times.items())}
    summary = summarize("partitions_leader_killed", (j.id for j in jobs), records, [], gaps=gaps)
    assert summary["lost"] == 0, summary
    # Only jobs whose acknowledgements the killed leader lost ran again.
    again = {job_id for job_id, n in records.counts("done").items() if n > 1}
    assert {_partition(job_id) for job_id in again} <= {1}, again
    # The killed partition waited for its election (seconds); the others never paused that
    # long (tens of milliseconds on an idle machine).
    others = max(gap for k, gap in gaps.items() if k != 1)
    report = _stall_report(urls[1:], times, killed_at, workers)
    assert gaps[1] > others, (gaps, report)
    assert others < 2.0, (gaps, report)


def _stall_report(urls: list[str], times: dict[int, list[float]], killed_at: float, workers: Workers) -> str:
    """What a failure needs to tell a stall of the workers from one of the servers: each
    partition's longest pause before the kill (the machine's own), where every partition's
    leaders are now, and what the workers warned of (a blocked event loop, pulls stopped)."""
    before = {k: round(longest_gap([t for t in ts if t < killed_at]), 3) for k, ts in sorted(times.items())}
    now = {stream: leaders(urls, stream, "default") for stream in STREAMS}
    warned: Counter[str] = Counter()
    for worker in workers.started:
        for event in worker.log_events():
            if event.get("level") in ("warning", "error"):
                warned[str(event.get("event"))] += 1
    return f"longest pause before the kill {before}; leaders now {now}; worker warnings {dict(warned)}"
