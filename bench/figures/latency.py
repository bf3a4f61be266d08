"""Enqueue-to-start latency at a steady rate, with an idle worker already running.

The producer stamps the enqueue time (``Jsw-Enqueued-At``, unix ns) into each job's headers;
the task records it next to its own start time. The raw baseline publishes the same messages
with ``js.publish`` at the same pace to the raw continuous-pull consumer, which records the
same two times on receipt. Both producers send one at a time on a fixed schedule, waiting
for each acknowledgement, and catch up without sleeping when they fall behind.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from apps import bench_app
from lib import jetstream as jsh
from lib import records
from lib.context import Context
from lib.procs import Child, start_raw_consumer, start_worker
from lib.stats import Measurement, percentile

WARMUP = 20
IDLE = 1.0
TIMEOUT = 120.0


async def _paced(send: Callable[[int], Awaitable[object]], n: int, rate: float) -> float:
    """Call ``send(i)`` for i < n at ``rate`` per second; the rate achieved."""
    for i in range(WARMUP):
        await send(-1 - i)
    await asyncio.sleep(IDLE)
    start = time.perf_counter()
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await send(i)
    return (n - 1) / max(time.perf_counter() - start, 1e-9)


async def _jsworker_producer(url: str, n: int, rate: float) -> float:
    bench_app.app.servers = [url]
    try:
        return await _paced(bench_app.probe.adelay, n, rate)
    finally:
        await bench_app.app.aclose()


async def _raw_producer(url: str, n: int, rate: float) -> float:
    nc = await jsh.connect(url)
    try:
        js = nc.jetstream()

        async def send(i: int) -> object:
            return await js.publish(jsh.RAW_SUBJECT, jsh.raw_body(i), headers=jsh.raw_headers())

        return await _paced(send, n, rate)
    finally:
        await nc.close()


def _measure(
    ctx: Context, name: str, n: int, rate: float, consumer: Callable[[str], Child], producer
) -> dict:  # type: ignore[no-untyped-def,type-arg]
    asyncio.run(jsh.purge(ctx.url))
    rec = ctx.record_file(name)
    with consumer(rec) as child:
        achieved = asyncio.run(producer(ctx.url, n, rate))
        got = records.wait_for(rec, n + WARMUP, TIMEOUT, alive=child.alive)
        if got < n + WARMUP:
            raise RuntimeError(f"{name}: {got} of {n + WARMUP} jobs started\n{child.log_tail()}")
    # The raw consumer numbers messages itself; the jsworker probe records the job's index.
    rows = (
        records.read(rec)[WARMUP:] if name.startswith("raw") else [r for r in records.read(rec) if r[0] >= 0]
    )
    lat_ms = [(at - enq) / 1e6 for _, enq, at in rows if enq]
    if len(lat_ms) != n:
        raise RuntimeError(f"{name}: {len(lat_ms)} latencies for {n} jobs")
    return {
        "p50": percentile(lat_ms, 50),
        "p95": percentile(lat_ms, 95),
        "p99": percentile(lat_ms, 99),
        "rate": achieved,
    }


def run(ctx: Context) -> list[Measurement]:
    """Latency figures of one run, for each configured rate."""
    out: list[Measurement] = []
    for rate, n in ctx.sizes.latency:
        raw = _measure(
            ctx,
            f"raw-lat{rate}",
            n,
            rate,
            lambda rec, n=n: start_raw_consumer(
                ctx.url, rec, ctx.log_dir, count=n + WARMUP, mode="continuous", queue=jsh.RAW_QUEUE
            ),
            _raw_producer,
        )
        jsw = _measure(
            ctx,
            f"jsw-lat{rate}",
            n,
            rate,
            lambda rec: start_worker(ctx.url, rec, ctx.log_dir, queues=bench_app.probe.queue, name="lat"),
            _jsworker_producer,
        )
        for who, res, label in (
            ("raw", raw, "raw publish -> continuous pull"),
            ("jsworker", jsw, "jsworker enqueue -> task start"),
        ):
            info = {"jobs": n, "rate": rate, "achieved_rate": round(res["rate"])}
            for p in ("p50", "p95", "p99"):
                out.append(
                    Measurement(f"latency.{who}_{rate}.{p}", res[p], "ms", f"{label} at {rate}/s, {p}", info)
                )
    return out
