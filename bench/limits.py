"""Flow-control limits next to the same jobs without them, in one run on one server.

    .venv/bin/python bench/limits.py [--jobs 4000] [--partitions 10000]

* **Rate limit accuracy.** The rate one in-process worker (``-c 100``) runs no-op jobs at,
  unthrottled, then the same jobs on a queue with ``rate_limit`` at 90 % of that rate: the
  achieved rate over the run, as a ratio to the limit (target: within 5 %).
* **Per-partition concurrency.** ``--partitions`` jobs, each of its own partition under
  ``max_running_per_partition=1``, against as many jobs of a task without partitions: jobs/s
  of each, and the nats-server's resident memory before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lib.procs import rss_mb

from jsworker import App
from jsworker.runtime.settings import WorkerSettings
from jsworker.runtime.worker import Worker
from jsworker.server import NatsServer

counted = 0
all_ran = asyncio.Event()
expected = 0


def _ran() -> None:
    global counted
    counted += 1
    if counted >= expected:
        all_ran.set()


async def run_all(app: App, send: object, n: int) -> float:
    """Jobs/s of ``n`` jobs ``send`` enqueues, run by one in-process worker."""
    global counted, expected
    counted, expected = 0, n
    all_ran.clear()
    await send  # type: ignore[misc]
    await app.aclose()
    worker = Worker(app, WorkerSettings(concurrency=100, grace=1))
    running = asyncio.create_task(worker.run())
    await worker.started.wait()
    started = time.perf_counter()
    await all_ran.wait()
    elapsed = time.perf_counter() - started
    worker.stop()
    await running
    await app.aclose()
    return n / elapsed


def make_app(url: str, name: str, rate: str | None = None) -> App:
    app = App(name, url)
    if rate is not None:
        app.queue("limited", rate_limit=rate)

    @app.task(queue="limited" if rate is not None else "default")
    async def noop(i: int) -> None:
        _ran()

    @app.task(partition_key=lambda key, **_: key, max_running_per_partition=1)
    async def parted(key: str) -> None:
        _ran()

    return app


async def main(jobs: int, partitions: int) -> None:
    with NatsServer() as server:
        free = make_app(server.url, "benchfree")
        unthrottled = await run_all(free, free.tasks["noop"].adelay_many([(i,) for i in range(jobs)]), jobs)
        limit = max(1, math.floor(unthrottled * 0.9))
        # A run of several periods: a short one is dominated by its first window's burst.
        limited_jobs = max(jobs // 2, 5 * limit)
        limited = make_app(server.url, "benchrated", f"{limit}/s")
        noop = limited.tasks["noop"]
        achieved = await run_all(limited, noop.adelay_many([(i,) for i in range(limited_jobs)]), limited_jobs)
        print(f"| unthrottled | {unthrottled:.0f} jobs/s |")
        ratio = achieved / limit
        print(
            f"| rate_limit {limit}/s ({limited_jobs} jobs) | {achieved:.0f} jobs/s, {ratio:.3f}x the limit |"
        )

        plain = make_app(server.url, "benchplain")
        base = await run_all(
            plain, plain.tasks["noop"].adelay_many([(i,) for i in range(partitions)]), partitions
        )
        pid = server.pid or 0
        before = rss_mb(pid)
        parted = make_app(server.url, "benchparted")
        keys = [(f"tenant-{i}",) for i in range(partitions)]
        rate = await run_all(parted, parted.tasks["parted"].adelay_many(keys), partitions)
        after = rss_mb(pid)
        print(f"| {partitions} jobs, no partitions | {base:.0f} jobs/s |")
        label = f"{partitions} partitions, max_running_per_partition=1"
        print(f"| {label} | {rate:.0f} jobs/s ({rate / base:.2f}x) |")
        print(f"| nats-server RSS | {before:.0f} MB before, {after:.0f} MB after the partitions |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--partitions", type=int, default=10_000)
    options = parser.parse_args()
    asyncio.run(main(options.jobs, options.partitions))
