"""Running ``jsworker run`` in subprocesses and reading what they did."""

from __future__ import annotations

import asyncio
import errno
import os
import re
import signal
import subprocess
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from jsworker import App, Task
from jsworker._runtime.settings import WorkerSettings
from jsworker._runtime.worker import Worker
from jsworker.testing import parse_execution

from .. import launcher
from ..support import exited, on_a_free_port, wait_until, wait_until_async

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


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``jsworker ARGS`` against ``url`` with the test apps importable; its output as text."""
    return launcher.run(args, env=worker_env(url), timeout=60)


def start_worker(
    url: str,
    record: Path,
    log: Path,
    *args: str,
    module: str = "acceptance_app",
    env: dict[str, str] | None = None,
) -> launcher.Launched:
    """Start ``jsworker run module`` with its output in ``log`` (``env`` added to its environment)."""
    return launcher.start(
        ["run", module, "--log-level", "warning", *args],
        env={**worker_env(url, record), **(env or {})},
        stdout=log,
    )


@contextmanager
def running_worker(url: str, record: Path, log: Path, *args: str) -> Iterator[launcher.Launched]:
    """A worker for the duration of the block; SIGTERM (then SIGKILL) afterwards, by pid."""
    proc = start_worker(url, record, log, *args)
    try:
        yield proc
    finally:
        stop(proc)


def stop(proc: launcher.Process, timeout: float = 15.0) -> int:
    """Stop a worker we started: SIGTERM, then SIGKILL if it does not exit in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def open_gate(fifo: Path) -> bool:
    """Let every run blocked reading the FIFO ``fifo`` go on (they read its end); False when
    none is reading it yet."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # no reader: nobody is waiting at the gate
            return False
        raise
    os.close(fd)
    return True


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


@asynccontextmanager
async def in_process_worker(app: App, **settings: Any) -> AsyncIterator[Worker]:
    """A :class:`Worker` of ``app`` on this event loop for the block, pulling before it starts;
    stopped (grace 1 s) and the app's connection closed afterwards. ``interceptors`` among
    ``settings`` go to the worker."""
    interceptors = settings.pop("interceptors", ())
    worker = Worker(
        app, WorkerSettings(**{"concurrency": 10, "grace": 1, **settings}), interceptors=interceptors
    )
    task = asyncio.create_task(worker.run())
    try:

        def pulling() -> bool:
            if task.done():  # a worker that could not start: its exception, not a timeout
                task.result()
            return worker.conn is not None and bool(worker._consumers)

        await wait_until_async(pulling, timeout=30, message="the worker to pull")
        yield worker
    finally:
        worker.stop()
        await task
        await app.aclose()


async def wait_buffered(worker: Worker, n: int) -> None:
    """Wait until ``worker``'s pull loops hold ``n`` jobs in their buffers, over all queues."""
    await wait_until_async(
        lambda: sum(len(c.buffered()) for c in worker._consumers.values()),
        until=lambda held: held == n,
        timeout=30,
        message=f"{n} jobs buffered",
    )


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def start_metrics_worker(
    env: dict[str, str], log: Path, module: str, *args: str, timeout: float = 30.0
) -> tuple[launcher.Launched, int]:
    """``jsworker run module --metrics-port P ARGS`` with its output in ``log``, on a port that
    was free a moment ago (on another one if the worker finds it taken); the process and its
    port, once the process serves its metrics there."""

    def start(port: int) -> tuple[launcher.Launched, int]:
        offset = log.stat().st_size if log.exists() else 0
        proc = launcher.start(
            ["run", module, "--metrics-port", str(port), "--metrics-addr", "127.0.0.1", *args],
            env=env,
            stdout=log,
        )

        wait_serving(proc, log, offset, port, timeout)
        return proc, port

    return on_a_free_port(start)


def wait_serving(
    proc: launcher.Process,
    log: Path,
    offset: int,
    port: int,
    timeout: float,
    logged: str | None = None,
) -> None:
    """Wait until the worker ``proc`` serves its metrics on ``port`` (and has logged the
    ``logged`` pattern past ``offset`` in ``log``, when given); stop it and raise if it does not.
    Raises PortInUseError (for :func:`on_a_free_port`) when it exits unable to bind the port."""

    def serving() -> bool:
        if proc.poll() is not None:
            exited(proc, log, offset, "cannot serve metrics", "the worker")
        if logged is not None and not re.search(logged, log.read_bytes()[offset:].decode(errors="replace")):
            return False
        try:
            # Our worker's figures, not those of whatever else may answer on the port.
            return value(scrape(port), "jsworker_concurrency_limit") > 0
        except OSError:
            return False

    try:
        wait_until(serving, timeout=timeout, message=f"the worker's metrics on port {port}")
    except BaseException:
        stop(proc)
        raise


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


@dataclass
class Holding:
    """An app whose task ``hold(n)`` notes ``n`` in ``started``, then runs until ``gate`` is
    set: jobs that stay running while a test looks at them."""

    app: App
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    started: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        @self.app.task
        async def hold(n: int) -> None:
            self.started.append(n)
            await self.gate.wait()

        self.hold: Task[[int], Coroutine[Any, Any, None]] = hold
