"""Delayed jobs: how punctually they start, what firing costs, and how the server holds many.

Three groups of figures, each next to a baseline measured in the same run:

* **Accuracy.** 1,000 delayed jobs due at one instant (a whole second 3-4 s ahead) reach an
  idle ``jsworker run -c 1000`` worker; each records ``time.time_ns()`` at its start and its
  ``current_job().scheduled_for``. Lateness is start - due (p50, p99, max), with the count of
  jobs started, of those started before their due time and of any that ran twice. Baseline:
  1,000 plain jobs sent with one ``adelay_many`` by the driver itself, lateness measured from
  the moment it sent them.
* **Cost.** Worker jobs/s on N fired jobs (``countdown=0.3``, every one fired into the queue
  before the worker starts) against N plain jobs (pre-enqueued the same way), one
  ``jsworker run -c 100`` each: the fired path adds one claim round trip per job. And the
  producer side: sequential ``aapply(countdown=...)`` against sequential ``adelay()``, us/job.
* **Scale.** A nats-server of its own (free loopback port, a store directory in the scratch
  directory) receives ``--pending`` delayed jobs due in a day through ``asyncio.gather`` of
  1,000 ``aapply`` calls at a time (baseline: the same gather of ``adelay`` on the suite's
  server). Reported: the enqueue rate, the server's VmRSS before and after (and after a
  restart), the stream's bytes, the store directory's size, ``app.acancel`` p50 over 50
  cancels (baseline: 50 cancels with nothing else pending), and, after SIGTERM and a start on
  the same store, the time from the new process's start to the first successful stream info
  and to the first delayed job accepted (baseline: the same restart with an empty stream).
  Each is also extrapolated linearly to 1,000,000 pending jobs.

This module is also the worker's app: ``jsworker run schedules`` (with ``bench/`` on the
path) imports it for ``app`` and its one task.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import math
import os
import shutil
import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
from lib import records
from lib.apps import using
from lib.context import QUICK, Context
from lib.procs import Child, rss_mb, start_worker
from lib.stats import Measurement, percentile

from jsworker import App, current_job
from jsworker._server import NatsServer

app = App("benchsched")
QUEUE = "sched"


@app.task(queue=QUEUE)
async def stamp(i: int) -> None:
    """Records its start and, for a fired job, the time it was due (unix ns; 0 for a plain job)."""
    due = current_job().scheduled_for
    records.record(i, round(due.timestamp() * 1000) * 1_000_000 if due is not None else 0)


ACCURACY_JOBS = 1_000
ACCURACY_AHEAD = 3.0
# A quick run is mostly the test suite's smoke run, on a machine busy with other tests: there,
# sending the 1,000 took up to 3.3 s, past a 3-4 s lead.
QUICK_ACCURACY_AHEAD = 10.0
ACCURACY_CONCURRENCY = 1_000
PROCESS_CONCURRENCY = 100
WARMUP = 20
WARMUP_FIRED = 5
IDLE = 1.0
FIRE_SOON = 0.3
DAY = 86_400.0
BATCH = 1_000
CANCELS = 50
EXTRAPOLATE_TO = 1_000_000
NORMAL_PENDING = 100_000
QUICK_PENDING = 5_000
MIN_PENDING = 2 * CANCELS
TIMEOUT = 600.0
RESTART_TIMEOUT = 120.0
PROBE_POLL = 0.002
# Accuracy keys: warm-up jobs are negative, fired ones 0..N-1, the plain burst N..2N-1.
BURST_KEY = ACCURACY_JOBS


def default_pending(ctx: Context) -> int:
    """Pending delayed jobs of the scale figures when ``--pending`` is not given."""
    return QUICK_PENDING if ctx.sizes is QUICK else NORMAL_PENDING


# -- the driver's connections -----------------------------------------------------------------


async def _quiet(_: Exception) -> None:
    # nats-py logs every failed connect; the restart probes expect many while the server starts.
    return None


async def _connect(url: str, *, retry: bool = True) -> nats.aio.client.Client:
    if retry:
        return await nats.connect(url, connect_timeout=5, max_reconnect_attempts=3)
    # One attempt, failing fast: nats-py otherwise waits reconnect_time_wait (2 s) before
    # giving up on a server that refused it, which would round the restart figures up.
    return await nats.connect(
        url,
        connect_timeout=0.5,
        allow_reconnect=False,
        max_reconnect_attempts=0,
        reconnect_time_wait=PROBE_POLL,
        error_cb=_quiet,
    )


async def _using(url: str, body: Callable[[], Awaitable[Any]]) -> Any:
    """``body()`` with the family's app on ``url``."""
    return await using(app, url, body)


async def _purge(url: str) -> None:
    nc = await _connect(url)
    try:
        js = nc.jetstream()
        for stream in (app.namespace.stream, app.namespace.schedules_stream, app.namespace.claims_stream):
            await js.purge_stream(stream)
    finally:
        await nc.close()


async def _counts(url: str) -> tuple[int, int]:
    """(messages in the job stream, of them jobs in the queue: fired or plain, not schedules)."""
    nc = await _connect(url)
    try:
        # Each job has a subject of its own (ending in its id): the queue's are summed.
        queue = app.namespace.queue_filter(QUEUE)
        info = await nc.jetstream().stream_info(app.namespace.stream, subjects_filter=queue)
        return int(info.state.messages), sum((info.state.subjects or {}).values())
    finally:
        await nc.close()


def _wait_counts(url: str, messages: int, queued: int, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    found = asyncio.run(_counts(url))
    while found != (messages, queued):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: stream holds {found}, not {(messages, queued)} (messages, queued)")
        time.sleep(0.05)
        found = asyncio.run(_counts(url))


async def _gather_enqueue(send: Callable[[int], Awaitable[Any]], start: int, n: int) -> list[Any]:
    """``send(i)`` for ``start <= i < start + n``, :data:`BATCH` in flight at a time."""
    out: list[Any] = []
    for s in range(start, start + n, BATCH):
        out.extend(await asyncio.gather(*(send(i) for i in range(s, min(start + n, s + BATCH)))))
    return out


def _delayed(countdown: float) -> Callable[[int], Awaitable[Any]]:
    return lambda i: stamp.aapply((i,), countdown=countdown)


def _worker(ctx: Context, rec: str, concurrency: int, name: str) -> Child:
    return start_worker(
        ctx.url, rec, ctx.log_dir, queues=QUEUE, concurrency=concurrency, module="schedules", name=name
    )


def _wait_records(rec: str, n: int, timeout: float, worker: Child, what: str) -> None:
    got = records.wait_for(rec, n, timeout, alive=worker.alive)
    if got < n:
        raise RuntimeError(f"{what}: {got} of {n} jobs started\n{worker.log_tail()}")


# -- accuracy ---------------------------------------------------------------------------------


def _lateness(rows: list[tuple[int, int, int]]) -> dict[str, float]:
    late = [(at - due) / 1e6 for _, due, at in rows]
    return {"min": min(late), "p50": percentile(late, 50), "p99": percentile(late, 99), "max": max(late)}


async def _warm_up() -> None:
    await stamp.adelay_many([(-1 - i,) for i in range(WARMUP)])
    for i in range(WARMUP_FIRED):
        await stamp.aapply((-1 - WARMUP - i,), countdown=FIRE_SOON)


async def _enqueue_due_together(ahead: float) -> tuple[int, float]:
    """1,000 delayed jobs due at one whole second ``ahead`` seconds or up to 1 s more ahead;
    (due in unix ns, seconds spent)."""
    due_s = math.ceil(time.time() + ahead)
    eta = datetime.fromtimestamp(due_s, UTC)
    started = time.perf_counter()
    jobs = await asyncio.gather(*(stamp.aapply((i,), eta=eta) for i in range(ACCURACY_JOBS)))
    spent = time.perf_counter() - started
    dues = {job.scheduled_for for job in jobs}
    if dues != {eta}:
        raise RuntimeError(f"accuracy: receipts are due at {sorted(map(str, dues))}, not {eta}")
    if time.time() >= due_s:
        raise RuntimeError(f"accuracy: enqueueing took {spent:.1f} s, past the due time")
    return due_s * 1_000_000_000, spent


async def _burst() -> int:
    """1,000 plain jobs in one ``adelay_many``; the unix ns just before it was called."""
    sent = time.time_ns()
    await stamp.adelay_many([(BURST_KEY + i,) for i in range(ACCURACY_JOBS)])
    return sent


def _accuracy(ctx: Context) -> list[Measurement]:
    asyncio.run(_purge(ctx.url))
    rec = ctx.record_file("sched-accuracy")
    warm = WARMUP + WARMUP_FIRED
    with _worker(ctx, rec, ACCURACY_CONCURRENCY, "sched-accuracy") as w:
        asyncio.run(_using(ctx.url, _warm_up))
        _wait_records(rec, warm, 60, w, "accuracy warm-up")
        time.sleep(IDLE)  # the worker idle, as a worker between firings is
        ahead = QUICK_ACCURACY_AHEAD if ctx.sizes is QUICK else ACCURACY_AHEAD
        due_ns, spent = asyncio.run(_using(ctx.url, functools.partial(_enqueue_due_together, ahead)))
        wait = (due_ns - time.time_ns()) / 1e9 + 60
        _wait_records(rec, warm + ACCURACY_JOBS, wait, w, "accuracy")
        _wait_counts(ctx.url, 0, 0, 60, "accuracy: every fired job acked")
        time.sleep(IDLE)
        sent_ns = asyncio.run(_using(ctx.url, _burst))
        _wait_records(rec, warm + 2 * ACCURACY_JOBS, 60, w, "accuracy burst")
        _wait_counts(ctx.url, 0, 0, 60, "accuracy: every plain job acked")
    rows = records.read(rec)
    fired = [r for r in rows if 0 <= r[0] < BURST_KEY]
    burst = [(k, sent_ns, at) for k, _, at in rows if k >= BURST_KEY]
    wrong_due = [r for r in fired if r[1] != due_ns]
    if wrong_due:
        raise RuntimeError(f"accuracy: {len(wrong_due)} jobs saw a scheduled_for other than their eta")
    keys = {k for k, _, _ in fired}
    late, base = _lateness(fired), _lateness(burst)
    info = {
        "jobs": ACCURACY_JOBS,
        "concurrency": ACCURACY_CONCURRENCY,
        "enqueue_s": round(spent, 3),
        "late_min_ms": round(late["min"], 2),
        "burst_late_min_ms": round(base["min"], 2),
    }
    out = [
        Measurement(f"schedules.accuracy.late_{p}", late[p], "ms", f"delayed job start - due, {p}", info)
        for p in ("p50", "p99", "max")
    ]
    out += [
        Measurement("schedules.accuracy.started", len(keys), "jobs", "delayed jobs started", info),
        Measurement(
            "schedules.accuracy.early",
            sum(1 for _, due, at in fired if at < due),
            "jobs",
            "delayed jobs started before due",
            info,
        ),
        Measurement("schedules.accuracy.duplicates", len(fired) - len(keys), "jobs", "extra runs", info),
    ]
    out += [
        Measurement(
            f"schedules.burst.late_{p}", base[p], "ms", f"plain jobs, start - adelay_many call, {p}", info
        )
        for p in ("p50", "p99", "max")
    ]
    return out


# -- cost -------------------------------------------------------------------------------------


async def _enqueue_plain(n: int) -> None:
    for s in range(0, n, 10_000):
        await stamp.adelay_many([(i,) for i in range(s, min(n, s + 10_000))])


def _processing(ctx: Context, fired: bool, n: int) -> float:
    """Worker jobs/s on ``n`` jobs waiting in the queue, fired ones or plain ones."""
    asyncio.run(_purge(ctx.url))
    if fired:
        asyncio.run(_using(ctx.url, lambda: _gather_enqueue(_delayed(FIRE_SOON), 0, n)))
    else:
        asyncio.run(_using(ctx.url, lambda: _enqueue_plain(n)))
    # Every plain job is stored in the queue; every delayed one waits, due, for a worker to
    # make it a schedule, which fires it at once, and to move it into the queue: the rate of
    # fired jobs is theirs through both moves.
    _wait_counts(ctx.url, n, 0 if fired else n, 120, "processing: jobs stored")
    name = "sched-fired" if fired else "sched-plain"
    rec = ctx.record_file(name)
    with _worker(ctx, rec, PROCESS_CONCURRENCY, name) as w:
        _wait_records(rec, n, TIMEOUT, w, name)
        _wait_counts(ctx.url, 0, 0, 60, f"{name}: every job acked")
    rows = records.read(rec)
    if len({r[0] for r in rows}) != n or len(rows) != n:
        raise RuntimeError(f"{name}: {len(rows)} records for {n} jobs")
    return records.span_rate(rows)


async def _sequential(n: int, delayed: bool) -> float:
    """Seconds per job of ``n`` enqueues one at a time (after one untimed warm-up)."""
    if delayed:
        await stamp.aapply((-1,), countdown=DAY)
        started = time.perf_counter()
        for i in range(n):
            await stamp.aapply((i,), countdown=DAY)
    else:
        await stamp.adelay(-1)
        started = time.perf_counter()
        for i in range(n):
            await stamp.adelay(i)
    return (time.perf_counter() - started) / n


def _enqueue_cost(ctx: Context, delayed: bool, n: int) -> float:
    asyncio.run(_purge(ctx.url))
    per_job = asyncio.run(_using(ctx.url, lambda: _sequential(n, delayed)))
    stored = asyncio.run(_counts(ctx.url))
    expected = (n + 1, 0) if delayed else (n + 1, n + 1)
    if stored != expected:
        raise RuntimeError(f"enqueue: stream holds {stored}, not {expected} (messages, queued)")
    return per_job * 1e6


def _cost(ctx: Context) -> list[Measurement]:
    n, m = ctx.sizes.process_jobs, ctx.sizes.enqueue_jobs
    # Alternate which goes first, so load that drifts within a run hits both alike.
    order = (False, True) if ctx.run % 2 == 0 else (True, False)
    rates = {fired: _processing(ctx, fired, n) for fired in order}
    costs = {delayed: _enqueue_cost(ctx, delayed, m) for delayed in order}
    asyncio.run(_purge(ctx.url))
    p_info = {"jobs": n, "concurrency": PROCESS_CONCURRENCY}
    e_info = {"jobs": m}
    return [
        Measurement("schedules.processing.plain", rates[False], "jobs/s", "plain jobs, 1 worker", p_info),
        Measurement(
            "schedules.processing.fired",
            rates[True],
            "jobs/s",
            "due delayed jobs through both moves, 1 worker",
            p_info,
        ),
        Measurement("schedules.enqueue.adelay_us", costs[False], "us", "await adelay(), per job", e_info),
        Measurement(
            "schedules.enqueue.countdown_us",
            costs[True],
            "us",
            "await aapply(countdown=1 day), per job",
            e_info,
        ),
    ]


# -- scale ------------------------------------------------------------------------------------


def _store_mb(path: Path) -> tuple[float, float]:
    """(MB allocated on disk, as du counts; MB of file sizes) under ``path``."""
    blocks = size = 0
    for root, _, files in os.walk(path):
        for name in files:
            st = os.stat(os.path.join(root, name))
            blocks += st.st_blocks * 512
            size += st.st_size
    return blocks / 2**20, size / 2**20


async def _stream_state(url: str) -> tuple[int, int]:
    nc = await _connect(url)
    try:
        info = await nc.jetstream().stream_info(app.namespace.stream)
        return int(info.state.messages), int(info.state.bytes)
    finally:
        await nc.close()


async def _cancel_times(job_ids: list[str]) -> list[float]:
    """Milliseconds each ``app.acancel`` took; every one must cancel a waiting job."""
    times = []
    for job_id in job_ids:
        started = time.perf_counter()
        cancelled = await app.acancel(job_id)
        times.append((time.perf_counter() - started) * 1e3)
        if not cancelled:
            raise RuntimeError(f"cancel: job {job_id} was not waiting")
    return times


async def _first_stream_info(url: str, deadline: float) -> float:
    """The monotonic time of the first stream info a fresh connection gets."""
    while True:
        nc = None
        try:
            nc = await _connect(url, retry=False)
            await nc.jetstream().stream_info(app.namespace.stream)
            return time.monotonic()
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(PROBE_POLL)
        finally:
            if nc is not None:
                await nc.close()


async def _first_accepted(deadline: float) -> float:
    """The monotonic time the first delayed job is accepted, the producer retrying quickly."""
    saved = app.connection
    # The default reconnect wait (0.5 s) would round the figure up to its steps.
    app.connection = dataclasses.replace(saved, reconnect_wait=PROBE_POLL, attempt_timeout=0.5)
    try:
        while True:
            try:
                await stamp.aapply((-1,), countdown=DAY)
                return time.monotonic()
            except Exception:
                await app.aclose()
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(PROBE_POLL)
    finally:
        await app.aclose()
        app.connection = saved


def _spawn_time(server: NatsServer, old: int | None, gave_up: Callable[[], bool]) -> float:
    """The monotonic time a process other than ``old`` runs for ``server`` (polled every 0.5 ms)."""
    while server.pid in (None, old) and not gave_up():
        time.sleep(0.0005)
    return time.monotonic()


async def _restart(server: NatsServer) -> dict[str, float]:
    """SIGTERM the server and start it again on its store: milliseconds from the new process's
    start to the first stream info and to the first delayed job accepted, and the stop's."""
    old = server.pid
    called = time.monotonic()
    restarting = asyncio.ensure_future(asyncio.to_thread(server.restart, RESTART_TIMEOUT))
    spawned = await asyncio.to_thread(_spawn_time, server, old, restarting.done)
    if restarting.done():
        restarting.result()  # raises why it failed; if it started, spawned is late by < 1 ms
    deadline = spawned + RESTART_TIMEOUT
    info_at, accepted_at = await asyncio.gather(
        _first_stream_info(server.url, deadline), _first_accepted(deadline)
    )
    await restarting
    return {
        "info_ms": (info_at - spawned) * 1e3,
        "accept_ms": (accepted_at - spawned) * 1e3,
        "stop_ms": (spawned - called) * 1e3,
    }


def _server_rss(server: NatsServer) -> float:
    pid = server.pid
    if pid is None:
        raise RuntimeError(f"scale: the server is not running\n{server.log_tail()}")
    return rss_mb(pid)


def _plain_gather_rate(ctx: Context, pending: int) -> float:
    asyncio.run(_purge(ctx.url))
    started = time.perf_counter()
    asyncio.run(_using(ctx.url, lambda: _gather_enqueue(stamp.adelay, 0, pending)))
    rate = pending / (time.perf_counter() - started)
    stored = asyncio.run(_counts(ctx.url))
    asyncio.run(_purge(ctx.url))
    if stored != (pending, pending):
        raise RuntimeError(f"plain gather: stream holds {stored}, not {pending} jobs")
    return rate


def _scale(ctx: Context, pending: int) -> list[Measurement]:
    plain_rate = _plain_gather_rate(ctx, pending)
    store = ctx.scratch / f"sched-store-{ctx.run}"
    server = NatsServer(store_dir=store)
    try:
        server.start()
        url = server.url
        asyncio.run(_using(url, app.provision))
        # Baselines on the same server with (almost) nothing pending.
        few = asyncio.run(_using(url, lambda: _gather_enqueue(_delayed(DAY), 0, CANCELS)))
        few_cancel = asyncio.run(_using(url, lambda: _cancel_times([j.id for j in few])))
        empty = asyncio.run(_restart(server))  # leaves the one job the probe enqueued
        rss_before = _server_rss(server)

        started = time.perf_counter()
        jobs = asyncio.run(_using(url, lambda: _gather_enqueue(_delayed(DAY), 0, pending)))
        enqueue_s = time.perf_counter() - started
        rss_after = _server_rss(server)
        messages, stream_bytes = asyncio.run(_stream_state(url))
        if messages != pending + 1:
            raise RuntimeError(f"scale: stream holds {messages} messages, not {pending + 1}")
        disk_mb, files_mb = _store_mb(store)

        # Spread over the stream: a cancel's lookup may cost more the further in its job is.
        picked = [jobs[i].id for i in range(0, pending, pending // CANCELS)][:CANCELS]
        cancel = asyncio.run(_using(url, lambda: _cancel_times(picked)))
        left = pending + 1 - CANCELS

        full = asyncio.run(_restart(server))
        rss_restarted = _server_rss(server)
        messages_after, _ = asyncio.run(_stream_state(url))
        if messages_after != left + 1:
            raise RuntimeError(f"scale: after the restart {messages_after} messages, not {left + 1}")
    finally:
        server.stop()
        shutil.rmtree(store, ignore_errors=True)

    scale = EXTRAPOLATE_TO / pending
    info: dict[str, Any] = {
        "pending": pending,
        "rss_per_job_bytes": round((rss_after - rss_before) * 2**20 / pending),
        "stream_bytes_per_job": round(stream_bytes / pending),
        "store_file_mb": round(files_mb, 1),
        "cancel_max_ms": round(max(cancel), 2),
        "stop_ms": round(full["stop_ms"]),
        "empty_stop_ms": round(empty["stop_ms"]),
    }
    cancel_p50, few_p50 = statistics.median(cancel), statistics.median(few_cancel)
    rate = pending / enqueue_s

    def linear(base: float, at_pending: float) -> float:
        # Growth below zero is noise (small --pending), not a server that shrinks with more jobs.
        return base + max(0.0, at_pending - base) * scale

    n = f"{pending:,}"
    return [
        Measurement(
            "schedules.pending.plain_enqueue_rate",
            plain_rate,
            "jobs/s",
            f"{n} plain jobs, gather of {BATCH:,} adelay",
            info,
        ),
        Measurement(
            "schedules.pending.enqueue_rate",
            rate,
            "jobs/s",
            f"{n} delayed jobs, gather of {BATCH:,} aapply",
            info,
        ),
        Measurement("schedules.pending.rss_before_mb", rss_before, "MB", "server RSS, nothing pending", info),
        Measurement("schedules.pending.rss_after_mb", rss_after, "MB", f"server RSS, {n} pending", info),
        Measurement(
            "schedules.pending.rss_restarted_mb",
            rss_restarted,
            "MB",
            f"server RSS after restart, {n} pending",
            info,
        ),
        Measurement("schedules.pending.stream_mb", stream_bytes / 2**20, "MB", f"stream bytes, {n}", info),
        Measurement("schedules.pending.store_mb", disk_mb, "MB", f"store dir on disk, {n}", info),
        Measurement("schedules.empty.cancel_p50", few_p50, "ms", "acancel p50, nothing else pending", info),
        Measurement("schedules.pending.cancel_p50", cancel_p50, "ms", f"acancel p50, {n} pending", info),
        Measurement(
            "schedules.empty.restart_info_ms",
            empty["info_ms"],
            "ms",
            "restart: process start -> stream info, empty",
            info,
        ),
        Measurement(
            "schedules.pending.restart_info_ms",
            full["info_ms"],
            "ms",
            f"restart: process start -> stream info, {n}",
            info,
        ),
        Measurement(
            "schedules.empty.restart_accept_ms",
            empty["accept_ms"],
            "ms",
            "restart: process start -> delayed job accepted, empty",
            info,
        ),
        Measurement(
            "schedules.pending.restart_accept_ms",
            full["accept_ms"],
            "ms",
            f"restart: process start -> delayed job accepted, {n}",
            info,
        ),
        Measurement(
            "schedules.at_1m.enqueue_s",
            EXTRAPOLATE_TO / rate,
            "s",
            "1M pending (linear): enqueue time",
            info,
        ),
        Measurement(
            "schedules.at_1m.rss_mb",
            linear(rss_before, rss_after),
            "MB",
            "1M pending (linear): server RSS",
            info,
        ),
        Measurement(
            "schedules.at_1m.stream_mb",
            stream_bytes * scale / 2**20,
            "MB",
            "1M pending (linear): stream bytes",
            info,
        ),
        Measurement(
            "schedules.at_1m.store_mb", disk_mb * scale, "MB", "1M pending (linear): store dir", info
        ),
        Measurement(
            "schedules.at_1m.cancel_p50",
            linear(few_p50, cancel_p50),
            "ms",
            "1M pending (linear): acancel p50",
            info,
        ),
        Measurement(
            "schedules.at_1m.restart_info_ms",
            linear(empty["info_ms"], full["info_ms"]),
            "ms",
            "1M pending (linear): restart -> stream info",
            info,
        ),
        Measurement(
            "schedules.at_1m.restart_accept_ms",
            linear(empty["accept_ms"], full["accept_ms"]),
            "ms",
            "1M pending (linear): restart -> job accepted",
            info,
        ),
    ]


def run(ctx: Context, pending: int | None = None) -> list[Measurement]:
    """The scheduling figures of one run; ``pending`` delayed jobs for the scale figures."""
    pending = default_pending(ctx) if pending is None else pending
    if pending < MIN_PENDING:
        raise ValueError(f"--pending must be at least {MIN_PENDING}, not {pending}")
    asyncio.run(_using(ctx.url, app.provision))
    return [*_accuracy(ctx), *_cost(ctx), *_scale(ctx, pending)]
