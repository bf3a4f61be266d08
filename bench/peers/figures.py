"""Peer figures: the processing and enqueue workloads through taskiq-nats and Dramatiq.

taskiq-nats runs on the suite's nats-server; Dramatiq on a redis-server started here for
the run. Workers are started through each system's own CLI, one worker process with the
nearest equivalent of jsworker's concurrency, and timed the same way: first job record to
last. Producers run in the peers' interpreter (``peers/driver.py``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from lib import records
from lib.context import Context
from lib.procs import BENCH_DIR, Child, bench_env
from lib.stats import Measurement

from . import setup
from .redis_server import RedisServer

TIMEOUT = 600.0
TASKIQ_ASYNC = 100
DRAMATIQ_THREADS = 8
TASKIQ_TUNED = {"BENCH_TASKIQ_PULL_BATCH": "100", "BENCH_TASKIQ_PULL_TIMEOUT": "0.1"}


def _driver(ctx: Context, env: dict[str, str], *args: object) -> dict[str, float]:
    argv = [str(setup.python()), str(BENCH_DIR / "peers" / "driver.py"), *map(str, args)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"peer driver {args} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _drain(ctx: Context, name: str, n: int, argv: list[str], env: dict[str, str], rec: str) -> float:
    child = Child(name, argv, env, ctx.log_dir, group=True)
    try:
        got = records.wait_for(rec, n, TIMEOUT, alive=child.alive)
        if got < n:
            raise RuntimeError(f"{name}: {got} of {n} jobs done\n{child.log_tail()}")
    finally:
        child.stop()
    return records.span_rate(records.read(rec))


def _taskiq(ctx: Context, bin_dir: Path, n: int, name: str, extra: dict[str, str]) -> float:
    rec = ctx.record_file(name)
    env = bench_env(ctx.url, rec, extra)
    _driver(ctx, env, "taskiq", "reset", 0)
    _driver(ctx, env, "taskiq", "fill", n)
    argv = [str(bin_dir / "taskiq"), "worker", "peers.taskiq_app:broker", "--workers", "1"]
    argv += ["--max-async-tasks", str(TASKIQ_ASYNC), "--log-level", "WARNING"]
    return _drain(ctx, name, n, argv, env, rec)


def _dramatiq(ctx: Context, bin_dir: Path, n: int, redis_url: str) -> tuple[float, float]:
    rec = ctx.record_file("dramatiq")
    env = bench_env(ctx.url, rec, {"BENCH_REDIS_URL": redis_url})
    enq = _driver(ctx, env, "dramatiq", "enqueue", ctx.sizes.enqueue_jobs)["sequential"]
    _driver(ctx, env, "dramatiq", "fill", n)
    argv = [str(bin_dir / "dramatiq"), "peers.dramatiq_app", "--processes", "1"]
    argv += ["--threads", str(DRAMATIQ_THREADS)]
    return enq, _drain(ctx, "dramatiq", n, argv, env, rec)


def run(ctx: Context) -> list[Measurement]:
    """Peer figures of one run."""
    bin_dir = setup.ensure_venv()
    redis_bin = setup.ensure_redis()
    n = ctx.sizes.process_jobs
    env = bench_env(ctx.url, ctx.record_file("taskiq-enqueue"))
    enq = _driver(ctx, env, "taskiq", "enqueue", ctx.sizes.enqueue_jobs)
    info = {"jobs": n}
    out = [
        Measurement(
            "peers.taskiq_enqueue", enq["sequential"], "jobs/s", "taskiq-nats await .kiq(), sequential", info
        ),
        Measurement(
            "peers.taskiq_enqueue_gather",
            enq["gathered"],
            "jobs/s",
            "taskiq-nats gather of 1000 .kiq()",
            info,
        ),
        Measurement(
            "peers.taskiq_processing",
            _taskiq(ctx, bin_dir, n, "taskiq", {}),
            "jobs/s",
            f"taskiq-nats worker, defaults (pull batch 1), {TASKIQ_ASYNC} async",
            info,
        ),
        Measurement(
            "peers.taskiq_tuned_processing",
            _taskiq(ctx, bin_dir, n, "taskiq-tuned", TASKIQ_TUNED),
            "jobs/s",
            f"taskiq-nats worker, pull batch 100 / 0.1 s, {TASKIQ_ASYNC} async",
            info,
        ),
    ]
    with RedisServer(redis_bin) as redis:
        d_enq, d_proc = _dramatiq(ctx, bin_dir, n, redis.url)
    out += [
        Measurement("peers.dramatiq_enqueue", d_enq, "jobs/s", "Dramatiq (Redis) .send(), sequential", info),
        Measurement(
            "peers.dramatiq_processing",
            d_proc,
            "jobs/s",
            f"Dramatiq (Redis) worker, 1 process x {DRAMATIQ_THREADS} threads",
            info,
        ),
    ]
    return out
