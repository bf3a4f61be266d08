"""Flow-control limits next to the same jobs without them, in one run on one server.

    .venv/bin/python bench/limits.py [--jobs 4000] [--partitions 10000] [--task-rate 20]

* **Rate limit accuracy.** The rate one in-process worker (``-c 100``) runs no-op jobs at,
  unthrottled, then the same jobs on a queue with ``rate_limit`` at 90 % of that rate: the
  achieved rate over the run, as a ratio to the limit (target: within 5 %).
* **Per-partition concurrency.** ``--partitions`` jobs, each of its own partition under
  ``max_running_per_partition=1``, against as many jobs of a task without partitions: jobs/s
  of each, and the nats-server's resident memory before and after.
* **Fair queue.** ``--jobs`` jobs over 100 partitions on a ``fair=True`` queue (each moved
  from the intake by the worker's mover), against the same jobs on a plain queue: jobs/s.
* **A task's rate limit offered more than it allows, beside another queue.** 10 s worth of
  jobs of a task limited to ``--task-rate`` per second, then ``--jobs`` no-op jobs of another
  queue, on the one worker: the no-op queue's jobs/s against its rate alone, the limited
  task's achieved rate as a ratio to its limit, and how often each limited job was given back
  to the server before it started (what keeping the other queue's slots costs).
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
from jsworker._observability.logging import configure_logging
from jsworker._runtime.settings import WorkerSettings
from jsworker._runtime.worker import Worker
from jsworker._server import NatsServer

counted = 0
all_ran = asyncio.Event()
expected = 0
first_at = last_at = 0.0


def _ran() -> None:
    global counted, first_at, last_at
    counted += 1
    last_at = time.perf_counter()
    if counted == 1:
        first_at = last_at
    if counted >= expected:
        all_ran.set()


async def run_all(app: App, send: object, n: int) -> float:
    """Jobs/s of ``n`` jobs ``send`` enqueues, run by one in-process worker: between the
    first job's run and the last's (the worker's start-up is not counted)."""
    global counted, expected
    counted, expected = 0, n
    all_ran.clear()
    await send  # type: ignore[misc]
    await app.aclose()
    worker = Worker(app, WorkerSettings(concurrency=100, grace=1))
    running = asyncio.create_task(worker.run())
    await worker.started.wait()
    await all_ran.wait()
    worker.stop()
    await running
    await app.aclose()
    return (n - 1) / (last_at - first_at)


def make_app(url: str, name: str, rate: str | None = None, fair: bool = False) -> App:
    app = App(name, url)
    if rate is not None:
        app.queue("limited", rate_limit=rate)
    if fair:  # else no mover stands by beside the other figures
        app.queue("turns", fair=True)

    @app.task(queue="turns", partition_key=lambda key, **_: key)
    async def turn(key: str) -> None:
        _ran()

    @app.task(queue="limited" if rate is not None else "default")
    async def noop(i: int) -> None:
        _ran()

    @app.task(partition_key=lambda key, **_: key, max_running_per_partition=1)
    async def parted(key: str) -> None:
        _ran()

    return app


async def main(jobs: int, partitions: int, task_rate: int) -> None:
    configure_logging("warning")  # a log line per job would be most of what is measured
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

        fair = make_app(server.url, "benchfair", fair=True)
        spread = [(f"tenant-{i % 100}",) for i in range(jobs)]
        turns = await run_all(fair, fair.tasks["turn"].adelay_many(spread), jobs)
        print(
            f"| {jobs} jobs, fair queue, 100 partitions | {turns:.0f} jobs/s ({turns / unthrottled:.2f}x) |"
        )
        await beside_a_limited_task(server.url, jobs, task_rate, unthrottled)


async def beside_a_limited_task(url: str, jobs: int, per_second: int, alone: float) -> None:
    """The no-op queue's rate while a rate-limited task's backlog waits, and the limit's."""
    app = App("benchbeside", url)
    ran: dict[str, list[float]] = {"capped": [], "noop": []}
    done, began, paced = asyncio.Event(), asyncio.Event(), asyncio.Event()
    limited = 10 * per_second

    @app.task(rate_limit=f"{per_second}/s")
    async def capped(i: int) -> None:
        ran["capped"].append(time.perf_counter())
        began.set()
        if len(ran["capped"]) >= limited // 2:  # half the backlog: the pace, past its first burst
            paced.set()

    @app.task(queue="other")
    async def noop(i: int) -> None:
        ran["noop"].append(time.perf_counter())
        if len(ran["noop"]) >= jobs:
            done.set()

    await capped.adelay_many([(i,) for i in range(limited)])
    await app.aclose()
    worker = Worker(app, WorkerSettings(concurrency=100, grace=1))
    running = asyncio.create_task(worker.run())
    await worker.started.wait()
    await began.wait()  # the limited backlog is in hand before the other queue fills
    await noop.adelay_many([(i,) for i in range(jobs)])
    await done.wait()
    await paced.wait()
    worker.stop()
    await running
    await app.aclose()
    times = ran["noop"]
    beside = (len(times) - 1) / (times[-1] - times[0])
    starts = ran["capped"][per_second:]  # from the second period on
    pace = (len(starts) - 1) / (starts[-1] - starts[0])
    back = worker.counts["snoozed"] / max(1, len(ran["capped"]))
    print(
        f"| {jobs} no-op jobs beside {limited} jobs of a {per_second}/s task | {beside:.0f} jobs/s "
        f"({beside / alone:.2f}x of alone); the task {pace / per_second:.3f}x its limit, "
        f"{back:.1f} give-backs per started job |"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--task-rate", type=int, default=20)
    options = parser.parse_args()
    asyncio.run(main(options.jobs, options.partitions, options.task_rate))
