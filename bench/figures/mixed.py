"""Jobs that wait on I/O: how close a worker gets to ideal concurrency.

N jobs each ``await asyncio.sleep(0.05)`` with ``--concurrency C``; the ideal time is
N x 0.05 / C, the efficiency ideal / actual, measured from the first job's end to the last
one's (plus one job's 50 ms, which the span between finishes leaves out).
"""

from __future__ import annotations

import asyncio

from apps import bench_app
from lib import jetstream as jsh
from lib import records
from lib.context import Context
from lib.procs import start_worker
from lib.stats import Measurement

from .processing import TIMEOUT, enqueue

SLEEP = 0.05


def run(ctx: Context) -> list[Measurement]:
    """The mixed figure of one run."""
    n, c = ctx.sizes.mixed_jobs, ctx.sizes.mixed_concurrency
    asyncio.run(jsh.purge(ctx.url))
    enqueue(ctx.url, bench_app.sleep50, n)
    rec = ctx.record_file("mixed")
    with start_worker(
        ctx.url, rec, ctx.log_dir, queues=bench_app.sleep50.queue, concurrency=c, name="mixed"
    ) as w:
        got = records.wait_for(rec, n, TIMEOUT, alive=w.alive)
        if got < n:
            raise RuntimeError(f"mixed: {got} of {n} jobs done\n{w.log_tail()}")
    stamps = [r[2] for r in records.read(rec)]
    # Finish stamps: the first job finished one sleep after the clock really started.
    actual = (max(stamps) - min(stamps)) / 1e9 + SLEEP
    ideal = n * SLEEP / c
    info = {"jobs": n, "concurrency": c, "ideal_s": ideal}
    return [
        Measurement("mixed.seconds", actual, "s", f"{n} x sleep(50 ms) at concurrency {c}", info),
        Measurement("mixed.efficiency", ideal / actual, "ratio", "ideal time / actual time", info),
    ]
