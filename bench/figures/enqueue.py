"""Enqueue rate: jsworker's producers next to raw nats-py publishing the same messages.

Every form starts from an empty stream, sends one warm-up message first (connection set-up
is not timed), and is checked to have stored exactly N messages.

The ``*_typed`` / ``*_untyped`` pairs measure typed arguments: the same call of a task whose
parameters are annotated (``int``, ``Decimal``, ``datetime``, a dataclass: each argument
checked and encoded) and of one whose parameters are not (the already-encoded values sent as
they are). Both send the same bodies, so the ratio is what checking and encoding cost.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

from apps import bench_app
from lib import jetstream as jsh
from lib.context import Context
from lib.stats import Measurement

WINDOW = 1000
TASK = bench_app.noop_async
TYPED = bench_app.charge_typed
UNTYPED = bench_app.charge_untyped


async def _adelay(n: int) -> float:
    for i in range(n):
        await TASK.adelay(i)
    return n


async def _adelay_many(n: int) -> float:
    await TASK.adelay_many([(i,) for i in range(n)])
    return n


def _adelay_args(task, extra: tuple[object, ...]) -> Callable[[int], Awaitable[float]]:  # type: ignore[no-untyped-def]
    """Sequential ``task.adelay(i, *extra)``."""

    async def form(n: int) -> float:
        for i in range(n):
            await task.adelay(i, *extra)
        return n

    return form


def _adelay_many_args(task, extra: tuple[object, ...]) -> Callable[[int], Awaitable[float]]:  # type: ignore[no-untyped-def]
    """``task.adelay_many`` of ``(i, *extra)`` items (built inside the timing, as above)."""

    async def form(n: int) -> float:
        await task.adelay_many([(i, *extra) for i in range(n)])
        return n

    return form


async def _raw_publish(js, n: int) -> None:  # type: ignore[no-untyped-def]
    subject = jsh.subject_of(TASK)
    for i in range(n):
        await js.publish(subject, jsh.raw_body(i), headers=jsh.raw_headers(TASK.name))


async def _raw_publish_async(js, n: int) -> None:  # type: ignore[no-untyped-def]
    subject = jsh.subject_of(TASK)
    for start in range(0, n, WINDOW):
        for i in range(start, min(n, start + WINDOW)):
            await js.publish_async(subject, jsh.raw_body(i), headers=jsh.raw_headers(TASK.name))
        await js.publish_async_completed()


async def _raw_publish_sliding(js, n: int) -> None:  # type: ignore[no-untyped-def]
    # nats-py's own pending limit (publish_async_max_pending=WINDOW) keeps WINDOW in flight:
    # a new publish waits for any acknowledgement, never for a whole window.
    subject = jsh.subject_of(TASK)
    for i in range(n):
        await js.publish_async(subject, jsh.raw_body(i), headers=jsh.raw_headers(TASK.name))
    await js.publish_async_completed()


async def _raw_publish_per_job(js, n: int) -> None:  # type: ignore[no-untyped-def]
    # What jsworker sends: each job on a subject of its own (ending in its id), nats-py's own
    # pending limit and no windows of ours, then one wait for every acknowledgement. On a
    # client with nats-py's defaults, the plain loop a user would write to compare with.
    prefix = jsh.subject_of(TASK) + "."
    for i in range(n):
        headers = jsh.raw_headers(TASK.name)
        await js.publish_async(prefix + headers["Nats-Msg-Id"], jsh.raw_body(i), headers=headers)
    await js.publish_async_completed()


async def _timed_jsworker(ctx: Context, form, n: int, task=TASK, extra: tuple[object, ...] = ()) -> float:  # type: ignore[no-untyped-def]
    bench_app.app.servers = [ctx.url]
    try:
        await task.adelay(-1, *extra)
        await jsh.purge(ctx.url)
        start = time.perf_counter()
        await form(n)
        return n / (time.perf_counter() - start)
    finally:
        await bench_app.app.aclose()


async def _timed_raw(ctx: Context, form, n: int, pending: int | None = WINDOW) -> float:  # type: ignore[no-untyped-def]
    nc = await jsh.connect(ctx.url)
    try:
        js = nc.jetstream() if pending is None else nc.jetstream(publish_async_max_pending=pending)
        await js.publish(jsh.subject_of(TASK), jsh.raw_body(-1), headers=jsh.raw_headers(TASK.name))
        await jsh.purge(ctx.url)
        start = time.perf_counter()
        await form(js, n)
        return n / (time.perf_counter() - start)
    finally:
        await nc.close()


def _timed_args(ctx: Context, make, task, extra: tuple[object, ...], n: int) -> float:  # type: ignore[no-untyped-def]
    """A form of ``make(task, extra)``, warmed up with the same arguments."""
    return asyncio.run(_timed_jsworker(ctx, make(task, extra), n, task, extra))


def _timed_sync_delay(ctx: Context, n: int) -> float:
    """``task.delay`` from a plain thread that has no event loop, as sync apps call it."""
    bench_app.app.servers = [ctx.url]
    result: list[float] = []

    def produce() -> None:
        TASK.delay(-1)
        asyncio.run(jsh.purge(ctx.url))
        start = time.perf_counter()
        for i in range(n):
            TASK.delay(i)
        result.append(n / (time.perf_counter() - start))

    thread = threading.Thread(target=produce, name="bench-sync-producer", daemon=True)
    thread.start()
    thread.join(600)
    bench_app.app.close()
    if not result:
        raise RuntimeError("sync enqueue did not finish within 600 s")
    return result[0]


def _checked(ctx: Context, rate: float, n: int, what: str) -> float:
    stored = asyncio.run(jsh.message_count(ctx.url))
    asyncio.run(jsh.purge(ctx.url))
    if stored != n:
        raise RuntimeError(f"{what}: the stream holds {stored} messages, expected {n}")
    return rate


def _check_typed_pair() -> None:
    """The typed figures mean something only if the typed task checks its arguments, the
    untyped one does not, and both send the same bodies."""
    if TYPED.typed is None or UNTYPED.typed is not None:
        raise RuntimeError("charge_typed must have typed arguments and charge_untyped none")
    sent, _ = TYPED.typed.encode((0, *bench_app.TYPED_ARGS), {})
    if sent != (0, *bench_app.UNTYPED_ARGS):
        raise RuntimeError(f"the typed task sends {sent!r}, the untyped one {bench_app.UNTYPED_ARGS!r}")


def run(ctx: Context) -> list[Measurement]:
    """All enqueue figures of one run."""
    n = ctx.sizes.enqueue_jobs
    _check_typed_pair()
    typed, untyped = bench_app.TYPED_ARGS, bench_app.UNTYPED_ARGS
    asyncio.run(jsh.purge(ctx.url))
    forms = [
        (
            "enqueue.raw_publish",
            "raw js.publish, sequential",
            lambda: asyncio.run(_timed_raw(ctx, _raw_publish, n)),
        ),
        (
            "enqueue.raw_publish_async",
            f"raw js.publish_async, windows of {WINDOW}",
            lambda: asyncio.run(_timed_raw(ctx, _raw_publish_async, n)),
        ),
        (
            "enqueue.raw_publish_async_sliding",
            f"raw js.publish_async, {WINDOW} in flight (sliding)",
            lambda: asyncio.run(_timed_raw(ctx, _raw_publish_sliding, n)),
        ),
        (
            "enqueue.raw_publish_async_per_job",
            f"raw js.publish_async on per-job subjects, {WINDOW} in flight (sliding)",
            lambda: asyncio.run(_timed_raw(ctx, _raw_publish_per_job, n)),
        ),
        (
            "enqueue.raw_publish_async_plain",
            "raw js.publish_async in a plain loop on per-job subjects, one wait at the end",
            lambda: asyncio.run(_timed_raw(ctx, _raw_publish_per_job, n, pending=None)),
        ),
        (
            "enqueue.adelay",
            "await task.adelay(), sequential",
            lambda: asyncio.run(_timed_jsworker(ctx, _adelay, n)),
        ),
        ("enqueue.delay_sync", "task.delay() from a plain thread", lambda: _timed_sync_delay(ctx, n)),
        (
            "enqueue.adelay_many",
            "await task.adelay_many(N items)",
            lambda: asyncio.run(_timed_jsworker(ctx, _adelay_many, n)),
        ),
        # Each typed form right after its untyped baseline: the machine's speed drifts.
        (
            "enqueue.adelay_untyped",
            "await task.adelay(4 unannotated args), sequential",
            lambda: _timed_args(ctx, _adelay_args, UNTYPED, untyped, n),
        ),
        (
            "enqueue.adelay_typed",
            "await task.adelay(int, Decimal, datetime, dataclass), sequential",
            lambda: _timed_args(ctx, _adelay_args, TYPED, typed, n),
        ),
        (
            "enqueue.adelay_many_untyped",
            "await task.adelay_many(N items of 4 unannotated args)",
            lambda: _timed_args(ctx, _adelay_many_args, UNTYPED, untyped, n),
        ),
        (
            "enqueue.adelay_many_typed",
            "await task.adelay_many(N items of int, Decimal, datetime, dataclass)",
            lambda: _timed_args(ctx, _adelay_many_args, TYPED, typed, n),
        ),
    ]
    out = []
    for figure, label, measure in forms:
        rate = _checked(ctx, measure(), n, figure)
        out.append(Measurement(figure, rate, "jobs/s", label, {"jobs": n}))
    return out
