"""The worker fleet: what ``jsworker run --processes N`` (and ``executor="process"``) buys.

Every figure drains N pre-enqueued jobs (not timed) with one ``jsworker run`` and takes the
rate between the first and the last job record, as :mod:`figures.processing` does; with two
processes the rate is taken while both worked (``records.overlap_rate``).

* **CPU-bound sync jobs**: each runs a pure-Python loop calibrated in this process to about
  2 ms (the same iteration count for every job). One process (``-c 4``, the thread pool
  shares one GIL), ``--processes 2`` (``-c 4`` each), and one process whose task has
  ``executor="process"`` (its pool of one process per CPU, here 2). Baseline: the loop itself run
  back to back in this process, the one-core ceiling (``cpu_ideal``).
* **No-op async jobs**: one process and ``--processes 2`` (``-c 100``). Baseline: the raw
  nats-py continuous pull of :mod:`figures.processing`, same N.
* **CPU used** in the two-process CPU-bound run: each worker process, the supervisor and the
  nats-server, in CPU seconds per second of the drain.

This module is also the workers' app: ``jsworker run fleet`` (with ``bench/`` on the path)
imports it for ``app`` and its tasks.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from figures import processing
from lib import jetstream as jsh
from lib import records
from lib.apps import using
from lib.context import Context
from lib.procs import Child, start_worker
from lib.stats import Measurement

from jsworker import App

app = App("benchfleet")

CPU_MS = 2.0
CHUNK = 10_000
TIMEOUT = 600.0


def burn(n: int) -> int:
    """Pure-Python work: ``n`` multiply-adds."""
    total = 0
    for i in range(n):
        total += i * i
    return total


@app.task(queue="cpu")
def cpu_sync(i: int, n: int) -> None:
    """About 2 ms of CPU in the worker's thread pool."""
    burn(n)
    records.record_pid(i)


@app.task(queue="cpu-process", executor="process")
def cpu_process(i: int, n: int) -> None:
    """The same work in the worker's pool of processes."""
    burn(n)
    records.record_pid(i)


@app.task(queue="noop")
async def noop(i: int) -> None:
    """Nothing but its record."""
    records.record_pid(i)


def calibrate(ms: float = CPU_MS) -> int:
    """Iterations of :func:`burn` that take about ``ms`` here."""
    n = 10_000
    while True:
        started = time.perf_counter()
        burn(n)
        took = time.perf_counter() - started
        if took > 0.05:
            return max(1, int(n * ms / 1000 / took))
        n *= 4


def _ideal(n: int, jobs: int = 500) -> float:
    started = time.perf_counter()
    for _ in range(jobs):
        burn(n)
    return jobs / (time.perf_counter() - started)


async def _enqueue(task: Any, jobs: int, extra: tuple[object, ...]) -> None:
    for s in range(0, jobs, CHUNK):
        await task.adelay_many([(i, *extra) for i in range(s, min(jobs, s + CHUNK))])


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    """The worker processes a supervisor started (not multiprocessing's resource tracker)."""
    try:
        pids = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    return [p for p in pids if b"resource_tracker" not in Path(f"/proc/{p}/cmdline").read_bytes()]


def _drain(
    ctx: Context,
    name: str,
    task: Any,
    jobs: int,
    extra: tuple[object, ...],
    concurrency: int,
    processes: int = 1,
) -> tuple[float, dict[str, float]]:
    """Jobs/s, and the CPU share of every process over the drain (worker processes, the
    supervisor when there is one, the nats-server)."""
    asyncio.run(jsh.purge(ctx.url))
    asyncio.run(using(app, ctx.url, lambda: _enqueue(task, jobs, extra)))
    rec = ctx.record_file(name)
    fleet = ("--processes", str(processes)) if processes > 1 else ()
    child: Child = start_worker(
        ctx.url,
        rec,
        ctx.log_dir,
        queues=task.queue,
        concurrency=concurrency,
        module="fleet",
        name=name,
        extra=fleet,
    )
    try:
        while records.count(rec) == 0:
            if not child.alive():
                raise RuntimeError(f"{name}: the worker exited\n{child.log_tail()}")
            time.sleep(records.POLL)
        server = ctx.server_pid
        procs = {"supervisor" if processes > 1 else "worker": child.pid, "nats-server": server}
        for k, pid in enumerate(_children(child.pid)):
            procs[f"worker-{k}"] = pid
        before = {who: _cpu_seconds(pid) for who, pid in procs.items() if pid}
        started = time.monotonic()
        got = records.wait_for(rec, jobs, TIMEOUT, alive=child.alive)
        wall = time.monotonic() - started
        used = {who: round((_cpu_seconds(procs[who]) - cpu) / wall, 2) for who, cpu in before.items()}
        if got < jobs:
            raise RuntimeError(f"{name}: {got} of {jobs} jobs done\n{child.log_tail()}")
        left = asyncio.run(jsh.wait_empty(ctx.url, 30))
        if left:
            raise RuntimeError(f"{name}: {left} jobs still in the stream after all ran")
    finally:
        child.stop()
    rows = records.read(rec)
    if len(rows) != jobs:
        raise RuntimeError(f"{name}: {len(rows)} records for {jobs} jobs (some ran twice)")
    return records.overlap_rate(rows), used


def run(ctx: Context) -> list[Measurement]:
    """The fleet figures of one run."""
    asyncio.run(using(app, ctx.url, app.provision))
    n = calibrate()
    cpu_jobs = max(200, ctx.sizes.process_jobs // 10)
    noop_jobs = ctx.sizes.process_jobs
    ideal = _ideal(n)
    one, _ = _drain(ctx, "cpu-1", cpu_sync, cpu_jobs, (n,), 4)
    two, used = _drain(ctx, "cpu-2", cpu_sync, cpu_jobs, (n,), 4, processes=2)
    pooled, _ = _drain(ctx, "cpu-pool", cpu_process, cpu_jobs, (n,), 4)
    raw = processing._raw(ctx, "fleet-raw", "continuous", noop_jobs)
    noop_one, _ = _drain(ctx, "noop-1", noop, noop_jobs, (), 100)
    noop_two, _ = _drain(ctx, "noop-2", noop, noop_jobs, (), 100, processes=2)
    cpu_info = {"jobs": cpu_jobs, "job_ms": CPU_MS}
    noop_info = {"jobs": noop_jobs, "concurrency": 100}
    return [
        Measurement(
            "fleet.cpu.ideal_one_core", ideal, "jobs/s", "the 2 ms loop back to back, one core", cpu_info
        ),
        Measurement("fleet.cpu.one_process", one, "jobs/s", "CPU-bound sync, 1 process (-c 4)", cpu_info),
        Measurement(
            "fleet.cpu.two_processes",
            two,
            "jobs/s",
            "CPU-bound sync, --processes 2 (-c 4 each)",
            {**cpu_info, "cpu": used},
        ),
        Measurement(
            "fleet.cpu.process_executor",
            pooled,
            "jobs/s",
            'CPU-bound, executor="process", 1 worker (-c 4)',
            cpu_info,
        ),
        Measurement("fleet.noop.raw_continuous", raw, "jobs/s", "raw continuous pull + ack", noop_info),
        Measurement("fleet.noop.one_process", noop_one, "jobs/s", "async no-op, 1 process", noop_info),
        Measurement("fleet.noop.two_processes", noop_two, "jobs/s", "async no-op, --processes 2", noop_info),
    ]
