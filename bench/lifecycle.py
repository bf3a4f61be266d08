"""Job lifecycle: what results, unique jobs, expiry and job subjects ending in the job id cost.

Four groups of figures, each next to a raw nats-py baseline measured on the same server in the
same run:

* **Result round trip.** An open-loop producer starts one job every 5 ms (200/s, on a timer,
  whatever the jobs before it are doing) of a no-op task with ``store_result=True``; each job
  is its own asyncio task timing ``await task.adelay(i)`` then ``await job.aresult()`` (which
  must return ``i``). One idle ``jsworker run -c 100`` worker runs them. p50 and p99 of
  enqueue -> result. Baseline: a raw nats-py responder in a process of its own (a core
  subscription echoing each request) and ``await nc.request(...)`` from the same open loop.
* **Processing with results.** Worker jobs/s on N pre-enqueued no-op jobs of a task that keeps
  its results (the worker stores a record before each ack), of one that does not, and of that
  one with final states kept (``App(final_states=True)`` in the worker: a record before each
  ack, and a no-op final-state handler hearing each job in the same worker), one
  ``jsworker run -c 100`` each, drained as :mod:`figures.processing` drains (rate between the
  first and the last job record). Baseline: that module's raw continuous pull, same N.
* **Enqueue opt-ins.** Sequential ``await task.adelay(i)`` of a plain task, of a unique task
  (``unique=True``, every call a distinct key) and of a task with ``expires=60``, jobs/s.
  Baselines: raw ``js.publish`` of the plain task's message (subject ending in a fresh id,
  same headers) and of the unique task's (subject ending in the key's id,
  ``Nats-Expected-Last-Subject-Sequence: 0``).
* **Job subjects ending in the id.** A nats-server of its own with no worker, ``--pending``
  jobs enqueued by jsworker (one subject per job) or the same count published by raw nats-py
  on the queue's single task subject (the layout before job ids were in the subject), each
  layout on a fresh server. Reported: the server's RSS growth, the stream's bytes, the store
  directory on disk, and the restart (SIGTERM, start on the same store) to the first stream
  info. The servers, the enqueue and the restart are :mod:`schedules`'s (its app and task,
  its ``_restart`` probe, its RSS and store readings), so both families measure alike.

This module is also the worker's app: ``jsworker run lifecycle`` (with ``bench/`` on the path)
imports it for ``app`` and its tasks. ``python bench/lifecycle.py respond SUBJECT`` is the raw
responder.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
import nats.errors
import schedules
from figures import processing
from lib import apps, records
from lib import jetstream as jsh
from lib.context import Context
from lib.procs import BENCH_DIR, Child, bench_env, start_worker
from lib.stats import Measurement, percentile

from jsworker import App, JobStatus
from jsworker._server import NatsServer
from jsworker._wire.headers import CONTENT_TYPE, ENQUEUED_AT, EXPECTED_LAST_SUBJECT_SEQ, JOB_ID, MSG_ID, TASK

# Set in the worker of the final-states drain only: the producer and the other workers keep
# no final states (the streams are the same either way).
FINAL_STATES = os.environ.get("BENCH_FINAL_STATES") == "1"
app = App("benchlife", final_states=FINAL_STATES)

if FINAL_STATES:

    @app.on_final_state("bench")
    async def heard(status: JobStatus) -> None:
        """Hears each job's end: what the handler's consumer costs beside the jobs."""


@app.task(queue="results", store_result=True)
async def noop_result(i: int) -> int:
    """Records that it ran; its return value is stored for ``job.aresult()``."""
    records.record(i)
    return i


@app.task(queue="plain")
async def noop_plain(i: int) -> int:
    """The same task keeping no result."""
    records.record(i)
    return i


@app.task(queue="unique", unique=True)
async def noop_unique(i: int) -> None:
    """Never run here: one job per argument at a time (its id derives from ``i``)."""


@app.task(queue="expiring", expires=60)
async def noop_expiring(i: int) -> None:
    """Never run here: dropped unrun if no worker starts it within a minute."""


RATE = 200
WARMUP = 20
IDLE = 1.0
CONCURRENCY = 100
WARMUP_TIMEOUT = 60.0
RESULT_TIMEOUT = 30.0
ROUND_TRIP_TIMEOUT = 120.0
READY_TIMEOUT = 30.0
CHUNK = 10_000
ECHO_SUBJECT = "bench.life.echo"


# -- the driver's view of the app's streams ---------------------------------------------------


async def _using(url: str, body: Callable[[], Awaitable[Any]]) -> Any:
    """``body()`` with the family's app on ``url``."""
    return await apps.using(app, url, body)


async def _purge(url: str) -> None:
    """Empty the app's job stream and its jobs bucket."""
    await apps.purge(url, app)


def _wait_counts(url: str, expected: tuple[int, int], timeout: float, what: str) -> None:
    apps.wait_counts(url, app, expected, timeout, what)


def _worker(ctx: Context, rec: str, queue: str, name: str, final_states: bool = False) -> Child:
    return start_worker(
        ctx.url, rec, ctx.log_dir, queues=queue, concurrency=CONCURRENCY, module="lifecycle", name=name,
        env={"BENCH_FINAL_STATES": "1"} if final_states else None,
    )  # fmt: skip


# -- result round trip ------------------------------------------------------------------------


async def _open_loop(one: Callable[[int], Awaitable[float]], n: int, rate: float) -> dict[str, Any]:
    """``one(i)`` (returning its own milliseconds) started for i < n at ``rate`` per second,
    each in its own task, after :data:`WARMUP` sequential ones and :data:`IDLE` seconds."""
    for i in range(WARMUP):
        await asyncio.wait_for(one(-1 - i), WARMUP_TIMEOUT)
    await asyncio.sleep(IDLE)
    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[float]] = []
    lag = 0.0
    start = time.perf_counter()
    for i in range(n):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        # Open loop: a slow round trip never holds back the next start.
        lag = max(lag, time.perf_counter() - due)
        tasks.append(loop.create_task(one(i)))
    sent = time.perf_counter() - start
    async with asyncio.timeout(ROUND_TRIP_TIMEOUT):
        ms = await asyncio.gather(*tasks)
    return {"ms": ms, "rate": (n - 1) / max(sent, 1e-9), "lag_ms": lag * 1e3}


async def _result_trips(url: str, n: int) -> dict[str, Any]:
    async def one(i: int) -> float:
        started = time.perf_counter()
        job = await noop_result.adelay(i)
        try:
            value = await job.aresult(timeout=RESULT_TIMEOUT)
        except TimeoutError:
            status = await app.astatus(job.id)
            raise RuntimeError(
                f"round trip: no result for job {i} ({job.id}, seq {job.seq}) in {RESULT_TIMEOUT:g} s; "
                f"its status now: {status}"
            ) from None
        ms = (time.perf_counter() - started) * 1e3
        if value != i:
            raise RuntimeError(f"round trip: job {job.id} returned {value!r}, not {i}")
        return ms

    return await _using(url, lambda: _open_loop(one, n, RATE))


async def _await_responder(nc: nats.aio.client.Client, deadline: float) -> None:
    while True:
        try:
            await nc.request(ECHO_SUBJECT, b"ready", timeout=1.0)
            return
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def _request_trips(url: str, n: int) -> dict[str, Any]:
    nc = await jsh.connect(url)
    try:
        await _await_responder(nc, time.monotonic() + READY_TIMEOUT)

        async def one(i: int) -> float:
            body = jsh.raw_body(i)
            started = time.perf_counter()
            reply = await nc.request(ECHO_SUBJECT, body, timeout=RESULT_TIMEOUT)
            ms = (time.perf_counter() - started) * 1e3
            if reply.data != body:
                raise RuntimeError(f"request/reply: {reply.data!r} for {body!r}")
            return ms

        return await _open_loop(one, n, RATE)
    finally:
        await nc.close()


def _start_responder(ctx: Context) -> Child:
    argv = [sys.executable, str(BENCH_DIR / "lifecycle.py"), "respond", ECHO_SUBJECT]
    return Child("life-responder", argv, bench_env(ctx.url, ctx.record_file("life-responder")), ctx.log_dir)


def _trip_figures(who: str, label: str, res: dict[str, Any], n: int) -> list[Measurement]:
    info = {
        "jobs": n,
        "rate": RATE,
        "achieved_rate": round(res["rate"]),
        "max_lag_ms": round(res["lag_ms"], 2),
    }
    return [
        Measurement(f"lifecycle.{who}_{RATE}.{p}", percentile(res["ms"], q), "ms", f"{label}, {p}", info)
        for p, q in (("p50", 50), ("p99", 99))
    ]


def _round_trip(ctx: Context) -> list[Measurement]:
    n = dict(ctx.sizes.latency)[RATE]
    asyncio.run(_purge(ctx.url))
    with _start_responder(ctx) as responder:
        try:
            raw = asyncio.run(_request_trips(ctx.url, n))
        except Exception as exc:
            raise RuntimeError(f"request/reply failed\n{responder.log_tail()}") from exc
    rec = ctx.record_file("life-result")
    with _worker(ctx, rec, noop_result.queue, "life-result") as w:
        try:
            jsw = asyncio.run(_result_trips(ctx.url, n))
        except Exception as exc:
            ran = records.count(rec)
            raise RuntimeError(f"result round trip failed ({ran} jobs ran): {exc}\n{w.log_tail()}") from exc
        _wait_counts(ctx.url, (0, n + WARMUP), 30, "round trip: every job acked, its record kept")
    rows = records.read(rec)
    if len(rows) != n + WARMUP or len({r[0] for r in rows}) != n + WARMUP:
        raise RuntimeError(f"round trip: {len(rows)} runs of {n + WARMUP} jobs")
    return [
        *_trip_figures("reqrep", f"raw nats-py request -> reply at {RATE}/s", raw, n),
        *_trip_figures("result", f"adelay -> aresult, store_result=True, at {RATE}/s", jsw, n),
    ]


# -- processing with results on and off -------------------------------------------------------


async def _enqueue_many(task: Any, n: int) -> None:
    for s in range(0, n, CHUNK):
        await task.adelay_many([(i,) for i in range(s, min(n, s + CHUNK))])


def _drain(ctx: Context, task: Any, name: str, n: int, final_states: bool = False) -> float:
    asyncio.run(_purge(ctx.url))
    asyncio.run(_using(ctx.url, lambda: _enqueue_many(task, n)))
    # drain() also checks the bench app's stream, which the raw baseline left empty.
    rate = processing.drain(ctx, name, n, lambda rec: [_worker(ctx, rec, task.queue, name, final_states)])
    kept = n if task.options.store_result or final_states else 0
    _wait_counts(ctx.url, (0, kept), 30, f"{name}: every job acked, {kept} records kept")
    return rate


def _processing(ctx: Context) -> list[Measurement]:
    n = ctx.sizes.process_jobs
    raw = processing._raw(ctx, "life-raw", "continuous", n)
    # Alternate which goes first, so load that drifts within a run hits all alike.
    drains = [(noop_plain, False), (noop_result, False), (noop_plain, True)]
    if ctx.run % 2:
        drains.reverse()
    rates = {
        (task.name, final): _drain(ctx, task, f"life-{task.queue}{'-final' if final else ''}", n, final)
        for task, final in drains
    }
    asyncio.run(_purge(ctx.url))
    info = {"jobs": n, "concurrency": CONCURRENCY}
    return [
        Measurement("lifecycle.processing.raw_continuous", raw, "jobs/s", "raw continuous pull + ack", info),
        Measurement(
            "lifecycle.processing.results_off",
            rates[noop_plain.name, False],
            "jobs/s",
            "jsworker async no-op, no results, 1 worker",
            info,
        ),
        Measurement(
            "lifecycle.processing.results_on",
            rates[noop_result.name, False],
            "jobs/s",
            "jsworker async no-op, store_result=True, 1 worker",
            info,
        ),
        Measurement(
            "lifecycle.processing.final_states",
            rates[noop_plain.name, True],
            "jobs/s",
            "jsworker async no-op, no results, App(final_states=True) and a no-op handler, 1 worker",
            info,
        ),
    ]


# -- enqueue opt-ins --------------------------------------------------------------------------


def _raw_message(task: Any, i: int, unique: bool) -> tuple[str, dict[str, str]]:
    """The subject and headers jsworker sends for ``task(i)``: a fresh id, or a unique job's."""
    job_id = f"{task.name}-u{i:032x}" if unique else os.urandom(16).hex()
    headers = {TASK: task.name, ENQUEUED_AT: str(time.time_ns()), CONTENT_TYPE: "application/json"}
    if unique:
        headers[JOB_ID] = job_id
        headers[EXPECTED_LAST_SUBJECT_SEQ] = "0"
    else:
        headers[MSG_ID] = job_id
    return app.namespace.job_subject(task.queue, task.name, job_id), headers


async def _timed_raw(url: str, task: Any, unique: bool, n: int) -> float:
    nc = await jsh.connect(url)
    try:
        js = nc.jetstream()

        async def send(i: int) -> None:
            subject, headers = _raw_message(task, i, unique)
            await js.publish(subject, jsh.raw_body(i), headers=headers)

        await send(-1)
        await _purge(url)
        started = time.perf_counter()
        for i in range(n):
            await send(i)
        return n / (time.perf_counter() - started)
    finally:
        await nc.close()


async def _timed_adelay(url: str, task: Any, n: int) -> float:
    async def body() -> float:
        await task.adelay(-1)
        await _purge(url)
        started = time.perf_counter()
        for i in range(n):
            await task.adelay(i)
        return n / (time.perf_counter() - started)

    return await _using(url, body)


def _enqueue(ctx: Context) -> list[Measurement]:
    n = ctx.sizes.enqueue_jobs
    forms: list[tuple[str, str, Callable[[], Awaitable[float]]]] = [
        (
            "raw_publish",
            "raw js.publish, subject ending in the id, sequential",
            lambda: _timed_raw(ctx.url, noop_plain, False, n),
        ),
        ("adelay", "await adelay(), sequential", lambda: _timed_adelay(ctx.url, noop_plain, n)),
        (
            "expires",
            "await adelay() of an expires=60 task, sequential",
            lambda: _timed_adelay(ctx.url, noop_expiring, n),
        ),
        (
            "raw_publish_unique",
            "raw js.publish, expected last subject seq 0, sequential",
            lambda: _timed_raw(ctx.url, noop_unique, True, n),
        ),
        (
            "unique",
            "await adelay() of a unique=True task, distinct keys, sequential",
            lambda: _timed_adelay(ctx.url, noop_unique, n),
        ),
    ]
    out = []
    for name, label, form in forms:
        asyncio.run(_purge(ctx.url))
        rate = asyncio.run(form())
        stored = asyncio.run(apps.counts(ctx.url, app))
        if stored != (n, 0):
            raise RuntimeError(f"enqueue {name}: {stored} (jobs, records) stored, not {(n, 0)}")
        out.append(Measurement(f"lifecycle.enqueue.{name}", rate, "jobs/s", label, {"jobs": n}))
    asyncio.run(_purge(ctx.url))
    return out


# -- job subjects ending in the id: the server's cost ------------------------------------------


async def _publish_one_subject(url: str, n: int) -> None:
    """``n`` messages of the schedules app's task, as jsworker sent them before job ids were in
    the subject: one subject for the task, a unique ``Nats-Msg-Id`` each."""
    subject = schedules.app.namespace.job_subject(schedules.QUEUE, schedules.stamp.name)
    nc = await jsh.connect(url)
    try:
        js = nc.jetstream(publish_async_max_pending=schedules.BATCH)
        for i in range(n):
            await js.publish_async(subject, jsh.raw_body(i), headers=jsh.raw_headers(schedules.stamp.name))
        await js.publish_async_completed()
    finally:
        await nc.close()


def _layout(ctx: Context, per_id: bool, pending: int) -> dict[str, float]:
    """``pending`` jobs left waiting on a fresh server of their own: its readings."""
    name = "per-id" if per_id else "one-subject"
    store = ctx.scratch / f"life-store-{name}-{ctx.run}"
    server = NatsServer(store_dir=store)
    try:
        server.start()
        url = server.url
        asyncio.run(schedules._using(url, schedules.app.provision))
        rss_before = schedules._server_rss(server)
        started = time.perf_counter()
        if per_id:
            asyncio.run(schedules._using(url, lambda: schedules._enqueue_plain(pending)))
        else:
            asyncio.run(_publish_one_subject(url, pending))
        enqueue_s = time.perf_counter() - started
        rss_after = schedules._server_rss(server)
        messages, stream_bytes = asyncio.run(schedules._stream_state(url))
        if messages != pending:
            raise RuntimeError(f"{name}: stream holds {messages} messages, not {pending}")
        disk_mb, files_mb = schedules._store_mb(store)
        schedules.app.servers = [url]  # the restart probe enqueues through it
        restart = asyncio.run(schedules._restart(server))
        rss_restarted = schedules._server_rss(server)
    finally:
        server.stop()
        shutil.rmtree(store, ignore_errors=True)
    return {
        "rss_before_mb": rss_before,
        "rss_growth_mb": rss_after - rss_before,
        "rss_restarted_mb": rss_restarted,
        "stream_mb": stream_bytes / 2**20,
        "store_mb": disk_mb,
        "store_file_mb": files_mb,
        "enqueue_rate": pending / enqueue_s,
        **restart,
    }


def _pending(ctx: Context, pending: int) -> list[Measurement]:
    order = (True, False) if ctx.run % 2 == 0 else (False, True)
    found = {per_id: _layout(ctx, per_id, pending) for per_id in order}
    n = f"{pending:,}"
    out = []
    for per_id, who, layout in (
        (False, "one_subject", f"{n} jobs on one subject (raw)"),
        (True, "per_id", f"{n} jobs, a subject each (jsworker)"),
    ):
        got = found[per_id]
        info = {
            "pending": pending,
            "rss_before_mb": round(got["rss_before_mb"], 1),
            "rss_growth_per_job_bytes": round(got["rss_growth_mb"] * 2**20 / pending),
            "stream_bytes_per_job": round(got["stream_mb"] * 2**20 / pending),
            "store_file_mb": round(got["store_file_mb"], 1),
            "enqueue_rate": round(got["enqueue_rate"]),
            "restart_accept_ms": round(got["accept_ms"], 1),
            "stop_ms": round(got["stop_ms"]),
        }
        for key, unit, label in (
            ("rss_growth_mb", "MB", "server RSS growth"),
            ("rss_restarted_mb", "MB", "server RSS after restart"),
            ("stream_mb", "MB", "stream bytes"),
            ("store_mb", "MB", "store dir on disk"),
            ("info_ms", "ms", "restart: process start -> stream info"),
        ):
            figure = "restart_ms" if key == "info_ms" else key
            out.append(
                Measurement(f"lifecycle.pending.{who}.{figure}", got[key], unit, f"{label}, {layout}", info)
            )
    return out


def run(ctx: Context, pending: int | None = None) -> list[Measurement]:
    """The lifecycle figures of one run; ``pending`` jobs for the server-cost figures."""
    pending = schedules.default_pending(ctx) if pending is None else pending
    if pending < schedules.MIN_PENDING:
        raise ValueError(f"--pending must be at least {schedules.MIN_PENDING}, not {pending}")
    asyncio.run(_using(ctx.url, app.provision))
    return [*_round_trip(ctx), *_processing(ctx), *_enqueue(ctx), *_pending(ctx, pending)]


# -- the raw responder ------------------------------------------------------------------------


async def _respond(url: str, subject: str) -> None:
    """Echo every request on ``subject`` until stopped."""
    nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=3)

    async def echo(msg: nats.aio.msg.Msg) -> None:
        await nc.publish(msg.reply, msg.data)

    await nc.subscribe(subject, cb=echo)
    await nc.flush()
    await asyncio.Event().wait()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "respond":
        sys.exit(f"usage: python {Path(__file__).name} respond SUBJECT")
    asyncio.run(_respond(os.environ["JSWORKER_URL"], sys.argv[2]))
