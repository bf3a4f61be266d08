"""The capacity model, measured: jobs/s and CPU per job of the servers, the workers and the
producer at 1, 2, 4 and 8 partitions, on one server (R1) and on a three-node cluster with three
replicas (R3), with nats-server's default flush and with every write synced before its
acknowledgement (``sync_interval: always``); and the dedup window's memory per million ids.

    python bench/capacity.py [--jobs 40000] [--workers 2] [--partitions 1,2,4,8] [--runs 3]
                             [--replicas 1,3] [--sync default,always] [--servers URL,...]

Without ``--servers`` the servers are started here on loopback (a cluster's nodes share this
machine's cores). With ``--servers`` (a cluster across hosts, one replication and sync
setting: the servers' own) the same figures are taken against it, without the servers' CPU.

For each configuration: ``--workers`` ``jsworker run`` processes (``-c 200``) start with their
queue paused; the bench process enqueues ``--jobs`` no-op jobs with ``adelay_many`` (enqueue
jobs/s, the producer's CPU per job); the queue is resumed and the workers drain it (jobs/s,
their CPU per job); the servers' CPU per job covers both; then 300 sequential ``adelay`` calls
give the enqueue latency p50/p99 (µs). Each configuration runs ``--runs`` times on the same
servers, in turn with the others, and every figure is the median of its runs. Prints a table
and one JSON line per configuration (per run to stderr as they come).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nats
from lib import records
from lib.procs import Child, rss_mb, start_worker
from lib.stats import percentile

from jsworker import Admin, App
from jsworker._observability.logging import configure_logging
from jsworker._server import NatsCluster, NatsServer

LATENCY_CALLS = 300
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU of ``pids`` so far (seconds, from /proc)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / _TICKS


@contextmanager
def servers(replicas: int, sync: str, tmp: Path) -> Iterator[tuple[list[str], list[int]]]:
    """Servers of ``replicas`` nodes flushing as ``sync`` says: their URLs and pids."""
    extra: list[str] = []
    if sync == "always":
        config = tmp / "sync.conf"
        config.write_text("jetstream { sync_interval: always }\n")
        extra = ["-c", str(config)]
    if replicas == 1:
        with NatsServer(extra_args=extra) as server:
            assert server.pid is not None
            yield [server.url], [server.pid]
        return
    cluster = NatsCluster(replicas, extra_args=extra).start()
    try:
        yield cluster.urls, [node.pid for node in cluster.nodes if node.pid is not None]
    finally:
        cluster.stop()


def measure(
    urls: list[str],
    server_pids: list[int],
    name: str,
    partitions: int,
    replicas: int,
    jobs: int,
    workers: int,
    tmp: Path,
) -> dict[str, Any]:
    """One configuration's figures."""
    env = {"CAP_APP": name, "CAP_PARTITIONS": str(partitions), "CAP_REPLICAS": str(replicas)}
    # The app module reads its settings from the environment, as the workers' copies do.
    os.environ.update(env)
    capacity_app = importlib.reload(importlib.import_module("apps.capacity_app"))
    app: App = capacity_app.app
    app.servers = urls
    record_file = tmp / f"{name}.rec"
    asyncio.run(_ready(app))
    children = [
        start_worker(
            ",".join(urls),
            record_file,
            tmp,
            queues="default",
            concurrency=200,
            module="apps.capacity_app",
            name=f"{name}-w{i}",
            env=env,
        )
        for i in range(workers)
    ]
    try:
        figures = asyncio.run(_drive(app, capacity_app.noop, jobs, record_file, server_pids, children))
    finally:
        for child in children:
            child.stop()
    return {"app": name, "partitions": partitions, "replicas": replicas, "jobs": jobs, **figures}


async def _ready(app: App) -> None:
    """Streams and consumers made, the queue paused: workers take nothing until the enqueue ends."""
    try:
        await app.provision()
        async with Admin(app) as admin:
            await admin.pause_queue("default", datetime.now(UTC) + timedelta(hours=1))
    finally:
        await app.aclose()


async def _drive(
    app: App, task: Any, jobs: int, record_file: Path, server_pids: list[int], children: list[Child]
) -> dict[str, float]:
    try:
        await _wait_pulling(app, len(children))
        servers0 = cpu_seconds(server_pids)
        producer0, start = time.process_time(), time.perf_counter()
        for first in range(0, jobs, 5000):
            await task.adelay_many([(i,) for i in range(first, min(jobs, first + 5000))])
        enqueue_s = time.perf_counter() - start
        producer_cpu = time.process_time() - producer0
        workers0 = cpu_seconds([c.pid for c in children])
        async with Admin(app) as admin:
            await admin.resume_queue("default")
        got = records.wait_for(str(record_file), jobs, timeout=600)
        if got < jobs:
            raise RuntimeError(f"{got} of {jobs} jobs ran")
        # From the first job's run to the last one's: the workers' pulls resume at their own pace.
        drain_rate = records.span_rate(records.read(str(record_file)))
        worker_cpu = cpu_seconds([c.pid for c in children]) - workers0
        server_cpu = cpu_seconds(server_pids) - servers0
        latencies = []
        for i in range(LATENCY_CALLS):
            t = time.perf_counter()
            await task.adelay(jobs + i)
            latencies.append((time.perf_counter() - t) * 1e6)
        return {
            "enqueue_per_s": round(jobs / enqueue_s),
            "drain_per_s": round(drain_rate),
            "producer_us": round(producer_cpu / jobs * 1e6, 1),
            "worker_us": round(worker_cpu / jobs * 1e6, 1),
            "server_us": round(server_cpu / jobs * 1e6, 1),
            "adelay_p50_us": round(percentile(latencies, 50)),
            "adelay_p99_us": round(percentile(latencies, 99)),
        }
    finally:
        await app.aclose()


async def _wait_pulling(app: App, workers: int) -> None:
    """Until every worker has a pull request open on each partition's consumer."""
    async with Admin(app) as admin:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            (status,) = [q for q in await admin.queues() if q.queue == "default"]
            if status.waiting_pulls >= workers * app.queue_partitions("default"):
                return
            await asyncio.sleep(0.1)
    raise RuntimeError("the workers did not start pulling")


def dedup_memory(tmp: Path, count: int = 200_000) -> float:
    """MB of server memory per million ids the dedup window holds: ``count`` messages on one
    subject with a ``Nats-Msg-Id`` each, less the same without ids."""
    grown = []
    for with_ids in (True, False):
        with NatsServer() as server:
            assert server.pid is not None
            before = rss_mb(server.pid)
            asyncio.run(_publish(server.url, count, with_ids))
            grown.append(rss_mb(server.pid) - before)
    return round((grown[0] - grown[1]) * 1_000_000 / count, 1)


async def _publish(url: str, count: int, with_ids: bool) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="DEDUP", subjects=["dedup"], duplicate_window=120.0)
    for first in range(0, count, 1000):
        for i in range(first, first + 1000):
            await js.publish_async(
                "dedup", b"x" * 64, headers={"Nats-Msg-Id": f"job-{i:012d}"} if with_ids else None
            )
        await js.publish_async_completed()
    await nc.close()


def runs(
    args: argparse.Namespace,
    urls: list[str],
    pids: list[int],
    replicas: int,
    sync: str,
    counts: list[int],
    tmp: Path,
) -> list[dict[str, Any]]:
    """Every partition count's figures on these servers: the medians of ``args.runs`` runs,
    the counts taken in turn so that drifting load reaches them alike."""
    taken: dict[int, list[dict[str, Any]]] = {parts: [] for parts in counts}
    for run in range(args.runs):
        for parts in counts:
            name = f"cap_r{replicas}{sync[0]}{parts}_{run}"
            row = measure(urls, pids, name, parts, replicas, args.jobs, args.workers, tmp)
            print(json.dumps({**row, "sync": sync}), file=sys.stderr, flush=True)
            taken[parts].append(row)
    return [
        {
            "partitions": parts,
            "replicas": replicas,
            "sync": sync,
            "jobs": args.jobs,
            "runs": args.runs,
            **{key: statistics.median(r[key] for r in found) for key in FIGURES},
        }
        for parts, found in taken.items()
    ]


FIGURES = (
    "enqueue_per_s", "drain_per_s", "producer_us", "worker_us", "server_us", "adelay_p50_us", "adelay_p99_us",
)  # fmt: skip


def table(rows: list[dict[str, Any]]) -> str:
    columns: list[tuple[str, str, Callable[[Any], str]]] = [
        ("repl", "replicas", lambda v: f"R{v}"),
        ("sync", "sync", str),
        ("parts", "partitions", str),
        ("enqueue/s", "enqueue_per_s", lambda v: f"{round(v):,}"),
        ("drain/s", "drain_per_s", lambda v: f"{round(v):,}"),
        ("producer µs", "producer_us", str),
        ("worker µs", "worker_us", str),
        ("server µs", "server_us", str),
        ("adelay p50 µs", "adelay_p50_us", str),
        ("adelay p99 µs", "adelay_p99_us", str),
    ]
    out = ["| " + " | ".join(c[0] for c in columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(fmt(row.get(key, "-")) for _, key, fmt in columns) + " |" for row in rows]
    return "\n".join(out)


def main() -> None:
    configure_logging("warning")  # the pauses and resumes of every configuration are not news
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=40_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--partitions", default="1,2,4,8")
    parser.add_argument("--replicas", default="1,3")
    parser.add_argument("--sync", default="default,always")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--servers", default=None, help="comma-separated URLs of servers of your own")
    args = parser.parse_args()
    counts = [int(p) for p in args.partitions.split(",")]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="jsw-capacity-") as tmp_dir:
        tmp = Path(tmp_dir)
        if args.servers:
            rows += runs(args, args.servers.split(","), [], 3, "theirs", counts, tmp)
        else:
            for replicas in (int(r) for r in args.replicas.split(",")):
                for sync in args.sync.split(","):
                    with servers(replicas, sync, tmp) as (urls, pids):
                        rows += runs(args, urls, pids, replicas, sync, counts, tmp)
    for row in rows:
        print(json.dumps(row))
    print(table(rows))
    if not args.servers:
        with tempfile.TemporaryDirectory(prefix="jsw-dedup-") as tmp_dir:
            per_million = dedup_memory(Path(tmp_dir))
        print(json.dumps({"figure": "dedup_mb_per_million_ids", "value": per_million}))


if __name__ == "__main__":
    main()
