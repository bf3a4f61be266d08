"""What the fault tests share: worker processes, the record file, stream and dead-letter reads,
and the one-line JSON summary each test prints.

Workers are real ``jsworker run fault_app`` processes (``apps/`` on their PYTHONPATH) that we
start, signal and reap through their own ``Popen`` handles only. Servers come from the
``nats_server`` / ``nats_cluster`` fixtures; everything here talks to them over loopback with
plain nats-py, so nothing here depends on the package code under test.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import nats.js.errors

from jsworker.testing import Execution, parse_execution

from .. import launcher
from ..support import UNSETTLED, connected, connections, freeze, stream_messages, wait_until

if TYPE_CHECKING:
    from jsworker.testing import NatsCluster

APPS = Path(__file__).parent / "apps"
ROOT = Path(__file__).parents[2]

APP = "flt"
STREAM = "JSW_FLT"
DLQ_STREAM = "JSW_FLT_DLQ"


def _urls(urls: str | Sequence[str]) -> list[str]:
    return [urls] if isinstance(urls, str) else list(urls)


# -- worker processes ---------------------------------------------------------------------


def worker_env(urls: str | Sequence[str], record: Path) -> dict[str, str]:
    """Environment of a worker process: the servers, apps/ importable, the record file."""
    env = dict(os.environ)
    env["JSWORKER_URL"] = ",".join(_urls(urls))
    env["PYTHONPATH"] = os.pathsep.join([str(APPS), str(ROOT), env.get("PYTHONPATH", "")])
    env["JSW_TEST_RECORD"] = str(record)
    return env


class WorkerProc:
    """One ``jsworker run`` subprocess, its log file and how it ended."""

    def __init__(
        self,
        urls: str | Sequence[str],
        record: Path,
        log: Path,
        *args: str,
        module: str = "fault_app",
        env: dict[str, str] | None = None,
    ) -> None:
        self.log = log
        full_env = {**worker_env(urls, record), **(env or {})}
        self._log_offset = log.stat().st_size if log.exists() else 0
        # info level: the log must show "worker.started", which is how we know it pulls.
        self.proc = launcher.start(["run", module, "--log-format", "json", *args], env=full_env, stdout=log)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _log_lines(self) -> list[str]:
        with open(self.log, "rb") as f:
            f.seek(self._log_offset)
            return f.read().decode(errors="replace").splitlines()

    def log_events(self) -> list[dict[str, Any]]:
        """This run's structured log events (lines that are not JSON are skipped)."""
        out = []
        for line in self._log_lines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                out.append(event)
        return out

    def wait_started(self, timeout: float = 30.0) -> None:
        """Block until the worker logged ``worker.started`` (streams and consumers exist, pulls sent)."""
        self.wait_logged("worker.started", timeout)

    def wait_logged(self, event: str, timeout: float = 30.0) -> None:
        """Block until the worker logged ``event`` in this run; fail at once if it exited."""

        def logged() -> bool:
            if not self.alive():
                raise AssertionError(f"worker {self.pid} exited with {self.proc.returncode}:\n{self.tail()}")
            return any(e.get("event") == event for e in self.log_events())

        wait_until(logged, timeout=timeout, message=f"worker {self.pid} to log {event}")

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self._log_lines()[-lines:])

    def freeze(self, frozen: bool = True) -> None:
        """Stop our process where it is (SIGSTOP), or let it go on (SIGCONT): what it has
        written can be read while nothing changes (once every thread of it has stopped)."""
        if self.proc.poll() is None:
            if frozen:
                freeze(self.proc.pid)
            else:
                self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL our process (only if it is still ours to signal) and reap it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM, wait for the exit (SIGKILL after ``timeout``); returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait(10)


class Workers:
    """Every worker a test started, stopped (SIGTERM, then SIGKILL) when the test ends."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.record = tmp_path / "record.log"
        self.started: list[WorkerProc] = []

    def start(self, urls: str | Sequence[str], name: str, *args: str, **kw: Any) -> WorkerProc:
        worker = WorkerProc(urls, self.record, self.tmp_path / f"{name}.log", *args, **kw)
        self.started.append(worker)
        return worker

    def stop_all(self) -> None:
        for worker in self.started:
            worker.terminate(timeout=15)


# -- the record file ----------------------------------------------------------------------


@dataclass
class Records:
    """The record file, read incrementally (polled often while thousands of jobs run)."""

    path: Path
    all: list[Execution] = field(default_factory=list)
    _offset: int = 0
    _partial: bytes = b""

    def poll(self) -> list[Execution]:
        """Read the lines appended since the last call; return them."""
        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        self._offset += len(data)
        data = self._partial + data
        *lines, self._partial = data.split(b"\n")
        new = []
        for line in lines:
            rec = parse_execution(line.decode())
            if rec is not None:
                new.append(rec)
        self.all.extend(new)
        return new

    def of(self, event: str = "done", task: str | None = None) -> list[Execution]:
        self.poll()
        return [r for r in self.all if r.event == event and (task is None or r.task == task)]

    def counts(self, event: str = "done", task: str | None = None) -> Counter[str]:
        return Counter(r.job_id for r in self.of(event, task))

    def done_ids(self, task: str | None = None) -> set[str]:
        return set(self.counts("done", task))


def longest_gap(times: Iterable[float], after: float | None = None) -> float:
    """Longest time between consecutive events (only those at or after ``after``, with ``after``
    itself as the first point when given)."""
    ts = sorted(times)
    if after is not None:
        ts = [after] + [t for t in ts if t >= after]
    return max((b - a for a, b in pairwise(ts)), default=0.0)


# -- the server ---------------------------------------------------------------------------


def wait_stream_empty(urls: str | Sequence[str], timeout: float, stream: str = STREAM) -> None:
    """Wait until the job stream holds nothing: every job was acked or dead-lettered (terminated).

    This, not "every id was seen", is the proof that nothing is left: a job completed once but
    whose ack was lost is still in the stream, and will run again.
    """
    wait_until(
        lambda: stream_messages(urls, stream),
        until=lambda n: n == 0,
        timeout=timeout,
        interval=0.2,
        message=f"stream {stream} to be empty",
        ignore=UNSETTLED,  # a cluster electing a leader answers nothing for a while
    )


def stream_subjects(urls: str | Sequence[str], stream: str) -> dict[str, int]:
    """Messages stored in ``stream`` now, by subject (empty when it holds none)."""
    info = request_json(urls, f"$JS.API.STREAM.INFO.{stream}", {"subjects_filter": ">"})
    if "error" in info:
        raise AssertionError(f"stream info {stream}: {info['error']}")
    return {str(k): int(v) for k, v in ((info.get("state") or {}).get("subjects") or {}).items()}


@dataclass(frozen=True, slots=True)
class Letter:
    """One stored dead letter."""

    seq: int
    subject: str
    headers: dict[str, str]
    data: bytes


async def _dead_letters(urls: str | Sequence[str], stream: str) -> list[Letter]:
    async with connected(urls) as nc:
        js = nc.jetstream()
        try:
            state = (await js.stream_info(stream)).state
        except nats.js.errors.NotFoundError:
            return []
        out: list[Letter] = []
        if state.messages == 0:
            return out
        for seq in range(state.first_seq, state.last_seq + 1):
            try:
                m = await js.get_msg(stream, seq)
            except nats.js.errors.NotFoundError:
                continue
            # nats-py reads an empty body back as None.
            out.append(Letter(seq, m.subject or "", dict(m.headers or {}), m.data or b""))
        return out


def dead_letters(urls: str | Sequence[str], stream: str = DLQ_STREAM) -> dict[str, Letter]:
    """Dead letters by job id (``Jsw-Job-Id``), read again while the stream has no leader (a
    cluster electing one after a kill: the job stream may have its new one already)."""
    letters = wait_until(
        lambda: asyncio.run(_dead_letters(urls, stream)),
        until=lambda _: True,
        ignore=UNSETTLED,
        timeout=30,
        message=f"the dead letters in {stream}",
    )
    return {m.headers.get("Jsw-Job-Id", f"?{m.seq}"): m for m in letters}


async def _request_json(
    urls: str | Sequence[str], subject: str, payload: bytes, timeout: float
) -> dict[str, Any]:
    async with connected(urls) as nc:
        reply = await nc.request(subject, payload, timeout=timeout)
        return dict(json.loads(reply.data))


def request_json(
    urls: str | Sequence[str], subject: str, payload: dict[str, Any] | None = None, timeout: float = 5.0
) -> dict[str, Any]:
    """A JetStream API request (``$JS.API...``) and its JSON answer."""
    body = json.dumps(payload).encode() if payload is not None else b""
    return asyncio.run(_request_json(urls, subject, body, timeout))


# -- the summary --------------------------------------------------------------------------


def summarize(
    test: str,
    enqueued: Iterable[str],
    records: Records,
    dead: Iterable[str],
    *,
    task: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The test's figures, printed as one JSON line; call only once the job stream is empty.

    completed: jobs whose task finished at least once; duplicates: finishes beyond the first
    per job; lost: enqueued, never finished and not dead-lettered.
    """
    enqueued = set(enqueued)
    done = records.counts("done", task)
    dead = set(dead) & enqueued
    completed = enqueued & set(done)
    summary: dict[str, Any] = {
        "test": test,
        "enqueued": len(enqueued),
        "completed": len(completed),
        "duplicates": sum(n - 1 for job_id, n in done.items() if job_id in enqueued),
        "dead_lettered": len(dead),
        "lost": len(enqueued - completed - dead),
    }
    summary.update(extra)
    print(json.dumps(summary))  # noqa: T201 - the figures this suite exists to report (pytest -s)
    return summary


# -- clusters -----------------------------------------------------------------------------


def worker_connections(cluster: NatsCluster, app: str = APP) -> Counter[int]:
    """How many worker connections of ``app`` each running node (0 = n1) holds, from its /connz."""
    found: Counter[int] = Counter()
    for i, node in enumerate(cluster.nodes):
        if not node.running:
            continue
        name = f"jsworker:{app}:worker"
        found[i] += sum(1 for c in connections(node.monitoring_url) if c.get("name") == name)
    return found


def node_index(name: str) -> int:
    """``n2`` -> 1: NatsCluster names its nodes n1..nN, ``nodes[0]`` being n1."""
    return int(name.removeprefix("n")) - 1


def leaders(urls: Sequence[str], stream: str, consumer: str) -> tuple[str | None, str | None]:
    """Names of the current stream leader and consumer leader (None while there is none)."""
    out: list[str | None] = []
    for subject in (f"$JS.API.STREAM.INFO.{stream}", f"$JS.API.CONSUMER.INFO.{stream}.{consumer}"):
        try:
            # Short: without a leader nobody answers, and the caller polls.
            out.append((request_json(urls, subject, timeout=1.0).get("cluster") or {}).get("leader"))
        except Exception:  # no leader to answer yet
            out.append(None)
    return out[0], out[1]


def move_leaders(urls: Sequence[str], stream: str, consumer: str, to: str, timeout: float = 30.0) -> None:
    """Make node ``to`` the leader of both ``stream`` and its ``consumer`` (a planned stepdown
    with a preferred placement), so that killing that one node takes out both."""

    def placed() -> bool:
        current = leaders(urls, stream, consumer)
        if current == (to, to):
            return True
        placement = {"placement": {"preferred": to}}
        if current[0] not in (to, None):
            request_json(urls, f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", placement)
        elif current[1] not in (to, None):
            request_json(urls, f"$JS.API.CONSUMER.LEADER.STEPDOWN.{stream}.{consumer}", placement)
        return False

    wait_until(placed, timeout=timeout, interval=0.5, message=f"stream and consumer leaders on {to}")


def app_module(name: str) -> Iterator[ModuleType]:
    """The app module ``name`` of apps/, as producers in this process use it; its settings
    are restored after."""
    if str(APPS) not in sys.path:
        sys.path.insert(0, str(APPS))
    module = importlib.import_module(name)
    saved = (list(module.app.servers), module.app.options)
    try:
        yield module
    finally:
        module.app.close()
        module.app.servers, module.app.options = saved


class SteadyProducer:
    """Enqueues a batch of jobs from a thread of its own whenever fewer than ``low`` wait in
    the job stream, from :meth:`start` until :meth:`stop` (``at_least`` batches first, at most
    ``at_most``): work keeps running and arriving through whatever the test does meanwhile,
    however long a loaded machine takes for it. ``send(batch)`` enqueues batch number
    ``batch`` and returns its jobs."""

    def __init__(
        self,
        url: str,
        send: Callable[[int], Iterable[Any]],
        low: int,
        *,
        at_least: int = 0,
        at_most: int = 200,
    ) -> None:
        self.url, self._send, self._low = url, send, low
        self._at_least, self._at_most = at_least, at_most
        #: Ids of every job enqueued so far (read under :attr:`lock`).
        self.enqueued: set[str] = set()
        self.lock = threading.Lock()
        self._stopping = threading.Event()
        self._failure: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def start(self) -> SteadyProducer:
        self._thread.start()
        return self

    def stop(self) -> set[str]:
        """Stop after the batch under way; every job enqueued. Raises what the thread met."""
        self._stopping.set()
        self._thread.join(60)
        if self._failure:
            raise self._failure[0]
        return self.enqueued

    def _may_send(self, may_stop: bool) -> bool:
        """Whether the next batch is due: few jobs wait, or the producer may stop now."""
        return (may_stop and self._stopping.is_set()) or stream_messages(self.url, STREAM) < self._low

    def _run(self) -> None:
        try:
            for batch in range(self._at_most):
                if batch >= self._at_least and self._stopping.is_set():
                    return
                jobs = self._send(batch)
                with self.lock:
                    self.enqueued.update(j.id for j in jobs)
                wait_until(
                    functools.partial(self._may_send, batch + 1 >= self._at_least),
                    timeout=60,
                    message="the workers to work the backlog down",
                )
        except BaseException as exc:  # raised again by stop(), in the test's thread
            self._failure.append(exc)


def check_reruns(
    name: str,
    url: str,
    enqueued: set[str],
    records: Records,
    may_rerun: set[str],
    workers: Sequence[Any],
    **figures: Any,
) -> dict[str, Any]:
    """Report a run (:func:`summarize`, with the jobs that ran twice) and check it: every
    worker alive, nothing lost or dead-lettered, and only ``may_rerun`` (the jobs whose run
    was under way at the fault) run more than once."""
    ran_twice = {job_id for job_id, n in records.counts("start").items() if n > 1}
    summary = summarize(
        name, enqueued, records, dead_letters(url), **figures,
        ran_twice=len(ran_twice), ran_twice_others=len(ran_twice - may_rerun),
    )  # fmt: skip
    assert all(w.alive() for w in workers), [w.tail() for w in workers]
    assert summary["lost"] == 0
    assert summary["dead_lettered"] == 0
    assert ran_twice <= may_rerun, sorted(ran_twice - may_rerun)[:10]
    return summary


def open_gate(url: str, workers: Workers, name: str) -> None:
    """Let the runs held on ``name`` finish: create the gate file (``life_app.gate``), then
    tell the runs already waiting on it."""
    (workers.record.parent / f"gate-{name}").touch()

    async def announce() -> None:
        nc = await nats.connect(url)
        try:
            await nc.publish(f"lcy-test.gate.{name}", b"")
            await nc.flush()
        finally:
            await nc.close()

    asyncio.run(announce())
