"""Processing rate: pre-enqueued no-op jobs drained by worker processes.

Every figure pre-enqueues N jobs into an empty stream (not timed), starts its consumer
process(es), and takes the rate between the first and the last job record, so process
start-up is paid by every contender but not measured. With two workers the rate is taken
while both were working (``records.overlap_rate``), so one starting later does not count as
slowness; their queue is paused until both run, so that neither drains the jobs alone before
the other has started (a short run on a loaded machine would leave no overlap to measure).
Afterwards the stream must be empty (every job acked) and every job recorded once.

``async_typed`` / ``async_untyped`` drain jobs carrying the same four arguments (a JSON
string for a ``Decimal``, an ISO string for a ``datetime``, an object for a dataclass) of a
task whose parameters are annotated (decoded to ``Decimal``, ``datetime`` and the dataclass
before every call) and of one whose are not (called with the JSON values as they are).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from apps import bench_app
from lib import jetstream as jsh
from lib import records
from lib.context import Context
from lib.procs import Child, start_raw_consumer, start_worker, wait_exit
from lib.stats import Measurement

CONCURRENCY = 100
TIMEOUT = 600.0
# How long worker processes may take to start and register before a figure gives up.
START_TIMEOUT = 60.0


async def _enqueue_jobs(url: str, task, n: int, extra: tuple[object, ...]) -> None:  # type: ignore[no-untyped-def]
    task.app.servers = [url]
    try:
        for start in range(0, n, 10_000):
            await task.adelay_many([(i, *extra) for i in range(start, min(n, start + 10_000))])
    finally:
        await task.app.aclose()


def enqueue(url: str, task, n: int, extra: tuple[object, ...] = ()) -> None:  # type: ignore[no-untyped-def]
    """Put ``n`` jobs of ``task`` into its app's stream (not timed), called ``(i, *extra)``."""
    asyncio.run(_enqueue_jobs(url, task, n, extra))


def _tails(children: list[Child]) -> str:
    """The end of each child's log, for an error that names what went wrong."""
    return "\n".join(f"--- {c.name}\n{c.log_tail()}" for c in children)


def drain(
    ctx: Context,
    name: str,
    n: int,
    start: Callable[[str], list[Child]],
    rate: Callable[[list[tuple[int, int, int]]], float] = records.span_rate,
    exits: bool = False,
    settled: Callable[[], object] | None = None,
) -> float:
    """Start the consumers, wait for ``n`` records, check the stream emptied; jobs/s.

    ``settled()``, when given, runs once every job ran and before the consumers stop: the
    check that another app's stream emptied too (it raises if not).
    """
    rec = ctx.record_file(name)
    children = start(rec)
    try:
        got = records.wait_for(rec, n, TIMEOUT, alive=lambda: any(c.alive() for c in children))
        if got < n:
            raise RuntimeError(f"{name}: {got} of {n} jobs done\n{_tails(children)}")
        left = asyncio.run(jsh.wait_empty(ctx.url, 30))
        if left:
            raise RuntimeError(f"{name}: {left} jobs still in the stream after all ran (acks lost?)")
        if settled is not None:
            settled()
        if exits:
            codes = [wait_exit(c, 10) for c in children]
            if any(code != 0 for code in codes):
                raise RuntimeError(f"{name}: consumer exit codes {codes}\n{children[0].log_tail()}")
    finally:
        for c in children:
            c.stop()
    rows = records.read(rec)
    if len(rows) != n:
        raise RuntimeError(f"{name}: {len(rows)} records for {n} jobs (some ran twice)")
    return rate(rows)


def _jsworker(  # type: ignore[no-untyped-def]
    ctx: Context,
    name: str,
    task,
    workers: int,
    n: int,
    loop: str = "asyncio",
    extra: tuple[object, ...] = (),
    rate: Callable[[list[tuple[int, int, int]]], float] | None = None,
) -> float:
    asyncio.run(jsh.purge(ctx.url))
    enqueue(ctx.url, task, n, extra)
    together = workers > 1
    if together:
        asyncio.run(jsh.hold(ctx.url, task.queue, paused=True))

    def start(rec: str) -> list[Child]:
        children = [
            start_worker(
                ctx.url,
                rec,
                ctx.log_dir,
                queues=task.queue,
                concurrency=CONCURRENCY,
                name=f"{name}-{w}",
                loop=loop,
            )
            for w in range(workers)
        ]
        if together:
            # Resumed whatever happens: a later figure must not find the queue paused.
            try:
                started = asyncio.run(jsh.wait_workers(ctx.url, workers, START_TIMEOUT))
            finally:
                asyncio.run(jsh.hold(ctx.url, task.queue, paused=False))
            if not started:
                for child in children:
                    child.stop()
                raise RuntimeError(
                    f"{name}: {workers} workers did not all start in {START_TIMEOUT:g}s\n{_tails(children)}"
                )
        return children

    # noop_async records its worker's pid, which the overlap window needs.
    return drain(ctx, name, n, start, rate or (records.overlap_rate if together else records.span_rate))


def _raw(ctx: Context, name: str, mode: str, n: int, cpu: bool = False) -> float:
    """The raw consumer's jobs/s, or with ``cpu`` its CPU per job (µs)."""
    asyncio.run(jsh.purge(ctx.url))
    asyncio.run(jsh.publish_raw(ctx.url, n))
    return drain(
        ctx,
        name,
        n,
        lambda rec: [
            start_raw_consumer(ctx.url, rec, ctx.log_dir, count=n, mode=mode, queue=jsh.RAW_QUEUE, cpu=cpu)
        ],
        records.cpu_per_job if cpu else records.span_rate,
        exits=True,
    )


def run(ctx: Context) -> list[Measurement]:
    """All processing figures of one run."""
    n = ctx.sizes.process_jobs
    info = {"jobs": n, "concurrency": CONCURRENCY}
    out = [
        Measurement(
            "processing.raw_continuous",
            _raw(ctx, "raw-continuous", "continuous", n),
            "jobs/s",
            "raw continuous pull + fire-and-forget ack",
            info,
        ),
        # Right after its baseline: the machine's speed drifts within seconds.
        Measurement(
            "processing.async",
            _jsworker(ctx, "async", bench_app.noop_async, 1, n),
            "jobs/s",
            "jsworker async no-op, 1 worker",
            info,
        ),
        # CPU per job (user + system, from the process), which holds still on a shared machine
        # where rates do not: what the worker cores per 10k jobs/s of the capacity model are.
        Measurement(
            "processing.cpu.raw_continuous",
            _raw(ctx, "raw-cpu", "continuous", n, cpu=True),
            "us/job",
            "raw continuous pull, CPU per message",
            info,
        ),
        Measurement(
            "processing.cpu.async",
            _jsworker(ctx, "async-cpu", bench_app.noop_cpu, 1, n, rate=records.cpu_per_job),
            "us/job",
            "jsworker async no-op, 1 worker, CPU per job",
            info,
        ),
        Measurement(
            "processing.raw_fetch",
            _raw(ctx, "raw-fetch", "fetch", n),
            "jobs/s",
            "raw fetch(100) + ack()",
            info,
        ),
        Measurement(
            "processing.async_uvloop",
            _jsworker(ctx, "async-uvloop", bench_app.noop_async, 1, n, loop="uvloop"),
            "jobs/s",
            "jsworker async no-op, 1 worker on uvloop",
            info,
        ),
        Measurement(
            "processing.async_2workers",
            _jsworker(ctx, "async2", bench_app.noop_async, 2, n),
            "jobs/s",
            "jsworker async no-op, 2 workers",
            info,
        ),
        Measurement(
            "processing.sync",
            _jsworker(ctx, "sync", bench_app.noop_sync, 1, n),
            "jobs/s",
            "jsworker sync no-op, 1 worker",
            info,
        ),
        # Typed right after its untyped baseline; each task has its own queue, so the
        # worker (started with --queues naming that queue) pulls only the jobs measured.
        Measurement(
            "processing.async_untyped",
            _jsworker(ctx, "untyped", bench_app.charge_untyped, 1, n, extra=bench_app.UNTYPED_ARGS),
            "jobs/s",
            "jsworker async no-op, 4 unannotated args, 1 worker",
            info,
        ),
        Measurement(
            "processing.async_typed",
            _jsworker(ctx, "typed", bench_app.charge_typed, 1, n, extra=bench_app.TYPED_ARGS),
            "jobs/s",
            "jsworker async no-op, int/Decimal/datetime/dataclass args, 1 worker",
            info,
        ),
    ]
    return out
