"""Worker memory: resident size after a few jobs and after many.

One worker runs no-op jobs; its RSS (VmRSS) is read once the first batch is done and again
after the large total, with the worker idle both times. Growth between the two points would
be memory kept per job.
"""

from __future__ import annotations

import asyncio
import time

from apps import bench_app
from lib import jetstream as jsh
from lib import records
from lib.context import Context
from lib.procs import rss_mb, start_worker
from lib.stats import Measurement

from .processing import TIMEOUT

CHUNK = 10_000
SETTLE = 1.0


async def _enqueue_range(url: str, start: int, stop: int) -> None:
    bench_app.app.servers = [url]
    try:
        for s in range(start, stop, CHUNK):
            await bench_app.noop_async.adelay_many([(i,) for i in range(s, min(stop, s + CHUNK))])
    finally:
        await bench_app.app.aclose()


def run(ctx: Context) -> list[Measurement]:
    """The memory figures of one run."""
    small, large = ctx.sizes.memory_small, ctx.sizes.memory_large
    asyncio.run(jsh.purge(ctx.url))
    rec = ctx.record_file("memory")
    with start_worker(ctx.url, rec, ctx.log_dir, queues=bench_app.noop_async.queue, name="memory") as w:
        readings = []
        done = 0
        for target in (small, large):
            asyncio.run(_enqueue_range(ctx.url, done, target))
            got = records.wait_for(rec, target, TIMEOUT, alive=w.alive)
            if got < target:
                raise RuntimeError(f"memory: {got} of {target} jobs done\n{w.log_tail()}")
            done = target
            # Let buffered acks and metrics settle so both readings see an idle worker.
            time.sleep(SETTLE)
            readings.append(rss_mb(w.pid))
    info = {"small": small, "large": large}
    return [
        Measurement("memory.rss_small_mb", readings[0], "MB", f"worker RSS after {small:,} jobs", info),
        Measurement("memory.rss_large_mb", readings[1], "MB", f"worker RSS after {large:,} jobs", info),
        Measurement(
            "memory.growth_mb",
            readings[1] - readings[0],
            "MB",
            f"RSS growth {small:,} -> {large:,} jobs",
            info,
        ),
    ]
