"""Running ``jsworker run`` in subprocesses and reading what they did."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import nats
import nats.js.errors
from prometheus_client.parser import text_string_to_metric_families

from jsworker import App
from jsworker.runtime.worker import Worker, WorkerSettings
from jsworker.testing import parse_execution

APPS = Path(__file__).parent / "apps"
ROOT = Path(__file__).parents[2]


def worker_env(url: str, record: Path | None = None) -> dict[str, str]:
    """Environment for a worker subprocess: the server, the apps dir on the path, the record file."""
    env = dict(os.environ)
    env["JSWORKER_URL"] = url
    env["PYTHONPATH"] = os.pathsep.join([str(APPS), str(ROOT), env.get("PYTHONPATH", "")])
    if record is not None:
        env["JSW_TEST_RECORD"] = str(record)
    return env


def start_worker(
    url: str, record: Path, log: Path, *args: str, module: str = "acceptance_app"
) -> subprocess.Popen[bytes]:
    """Start ``jsworker run module`` with its output in ``log``."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "jsworker", "run", module, "--log-level", "warning", *args],
            env=worker_env(url, record),
            stdout=out,
            stderr=subprocess.STDOUT,
        )


@contextmanager
def running_worker(url: str, record: Path, log: Path, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """A worker for the duration of the block; SIGTERM (then SIGKILL) afterwards, by pid."""
    proc = start_worker(url, record, log, *args)
    try:
        yield proc
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> int:
    """Stop a worker we started: SIGTERM, then SIGKILL if it does not exit in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def records(path: Path, event: str = "done") -> list[tuple[str, str, int]]:
    """(job id, task, pid) of every recorded ``event``."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        rec = parse_execution(line)
        if rec is not None and rec.event == event:
            out.append((rec.job_id, rec.task, rec.pid))
    return out


def counts(path: Path, event: str = "done") -> Counter[str]:
    """How often each job id recorded ``event``."""
    return Counter(job_id for job_id, _, _ in records(path, event))


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll ``predicate`` until true; fail the test with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


async def stream_messages(url: str, stream: str) -> int:
    """Messages stored in ``stream`` right now."""
    nc = await nats.connect(url)
    try:
        info = await nc.jetstream().stream_info(stream)
        return int(info.state.messages)
    finally:
        await nc.close()


@asynccontextmanager
async def in_process_worker(app: App, **settings: Any) -> AsyncIterator[Worker]:
    """A :class:`Worker` of ``app`` on this event loop for the block, pulling before it starts;
    stopped (grace 1 s) and the app's connection closed afterwards."""
    worker = Worker(app, WorkerSettings(**{"concurrency": 10, "grace": 1, **settings}))
    task = asyncio.create_task(worker.run())
    try:
        while worker.conn is None or not worker._consumers:
            await asyncio.sleep(0.05)
        yield worker
    finally:
        worker.stop()
        await task
        await app.aclose()


async def waiting_pulls(url: str, stream: str, consumer: str) -> int:
    """Pull requests waiting on ``consumer`` right now: one per idle worker pull loop."""
    nc = await nats.connect(url)
    try:
        return int((await nc.jetstream().consumer_info(stream, consumer)).num_waiting)
    except nats.js.errors.NotFoundError:
        return 0
    finally:
        await nc.close()


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    """A loopback port free right now (a hint: whoever binds it first gets it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> Samples:
    """Every sample of a /metrics endpoint on 127.0.0.1, keyed by (name, sorted labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value (0 when absent, as for a counter never incremented)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)
