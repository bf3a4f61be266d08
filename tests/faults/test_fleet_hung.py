"""A fleet whose worker processes cannot exit after they stopped (``apps/hung_app.py``: each
holds two sleeping children and a thread that waits for them, as a worker holding a process
pool did). The supervisor kills such a process, with its children, a few seconds after it
reported its stop: a recycled one is replaced at once, and a fleet told to stop still exits,
soon and with 0.

Every process here is found by its pid in the logs and the record file, and whatever is left
at the end of a test (when the supervisor failed to kill it) is killed by that pid, once its
command line shows it is still the process we mean.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from datetime import datetime
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from jsworker.testing import NatsServer

from ..integration.workers import scrape, start_metrics_worker, stop, value
from ..support import wait_consumer_settled, wait_until
from .harness import Records, Workers, app_module, worker_env

pytestmark = pytest.mark.faults

MODULE = "hung_app"
HANG = {"JSW_TEST_HANG": "1"}
GRACE = 2.0
# What the supervisor gives a process that has reported its stop before it kills it.
EXIT_DEADLINE = 5.0
# Room for a loaded machine: the spawn of a process, a scrape, a log line.
MARGIN = 4.0


@pytest.fixture
def hung_app() -> Iterator[ModuleType]:
    """The app module, as producers in this process use it (no children here: JSW_TEST_HANG
    is unset in the test's own process)."""
    yield from app_module(MODULE)


# -- helpers ------------------------------------------------------------------------------


def _events(log: Path) -> list[dict[str, Any]]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            out.append(event)
    return out


def _named(log: Path, name: str) -> list[dict[str, Any]]:
    return [e for e in _events(log) if e.get("event") == name]


def _at(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["timestamp"])).timestamp()


def _children(record: Path) -> dict[int, list[int]]:
    """Worker pid -> the pids of the children it started (``child <worker> <child>`` lines)."""
    found: dict[int, list[int]] = {}
    if record.exists():
        for line in record.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "child":
                found.setdefault(int(parts[1]), []).append(int(parts[2]))
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _gone(pid: int) -> bool:
    """No process ``pid`` runs (a zombie waiting for whoever inherited it counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def _alive(pids: list[int]) -> list[int]:
    return [pid for pid in pids if not _gone(pid)]


def _kill_leftovers(log: Path, record: Path, marker: str) -> None:
    """SIGKILL what the fleet of this test started and left running: worker processes (spawned
    by multiprocessing) and the app's children (``marker`` on their command line)."""
    workers = [int(e["pid"]) for e in _named(log, "fleet.process_started")] if log.exists() else []
    candidates = [(pid, b"multiprocessing") for pid in workers]
    candidates += [(pid, marker.encode()) for pids in _children(record).values() for pid in pids]
    for pid, sign in candidates:
        if not _gone(pid) and sign in _cmdline(pid):
            os.kill(pid, signal.SIGKILL)


# -- tests --------------------------------------------------------------------------------


@pytest.mark.timeout(150)
def test_a_recycled_process_that_cannot_exit_is_killed_and_replaced_at_once(
    nats_server: NatsServer, hung_app: ModuleType, tmp_path: Path
) -> None:
    """Two processes that recycle every 2 jobs and hang at exit: the 6 jobs queued need a
    third process. Each retiring process is replaced as soon as it reports its last job done,
    and killed, with both its children, :data:`EXIT_DEADLINE` later; the kill is logged and
    counted; the fleet still stops with 0."""
    record, log = tmp_path / "record.log", tmp_path / "fleet.log"
    hung_app.app.servers = [nats_server.url]
    jobs = 6
    hung_app.work.delay_many([(i,) for i in range(jobs)])
    env = {**worker_env(nats_server.url, record), **HANG}
    proc, port = start_metrics_worker(
        env, log, MODULE, "--processes", "2", "--max-jobs-per-process", "2", "-c", "1",
        "--grace", str(GRACE), "--log-format", "json", "--log-level", "info",
    )  # fmt: skip
    try:
        wait_until(
            lambda: len(Records(record).counts()),
            until=lambda n: n == jobs,
            timeout=60,
            message="every job run",
        )
        wait_consumer_settled(nats_server.url, "JSW_HNG", "default")
        assert max(Records(record).counts().values()) == 1  # none ran twice
        # At least two processes ran 2 jobs each (a slot's last process may run fewer). A
        # recycle is logged once the retiring worker has stopped, after its last job's
        # record: waited for.
        recycled = wait_until(
            lambda: _named(log, "fleet.process_recycled"),
            until=lambda events: len(events) >= 2,
            timeout=30,
            message="two processes recycled",
        )

        def killed() -> dict[int, dict[str, Any]]:
            return {int(e["pid"]): e for e in _named(log, "fleet.process_killed")}

        retired = {int(e["pid"]): e for e in recycled}
        wait_until(
            killed,
            until=lambda k: set(retired) <= set(k),
            timeout=EXIT_DEADLINE + MARGIN + 5,
            message=f"the retired processes {sorted(retired)} killed",
        )
        kills = killed()
        started = _named(log, "fleet.process_started")
        children = _children(record)
        for pid, event in retired.items():
            kill = kills[pid]
            assert kill["level"] == "warning" and kill["reason"] == "exit"
            waited = _at(kill) - _at(event)
            # It got its time to exit, and not much more.
            assert EXIT_DEADLINE - 0.5 <= waited <= EXIT_DEADLINE + MARGIN, (pid, waited)
            # Its replacement was started when it reported its last job, not when it was gone.
            assert any(
                s["process"] == event["process"] and _at(event) <= _at(s) < _at(kill) for s in started
            ), (pid, started)
            # Killed, and gone once the kernel has torn it down (a moment on a loaded machine).
            wait_until(partial(_gone, pid), timeout=5, message=f"process {pid} gone")
            # One in its process group, one in a session of its own: both killed with it.
            assert len(children[pid]) == 2
            assert set(children[pid]) <= set(kill["children"]), kill
        orphans = [child for pid in retired for child in children[pid]]
        wait_until(
            lambda: _alive(orphans),
            until=lambda left: not left,
            timeout=5,
            message="the children of the killed processes gone",
        )
        samples = scrape(port)
        assert value(samples, "jsworker_worker_kills_total", reason="exit") >= len(retired)
        assert value(samples, "jsworker_worker_kills_total", reason="stop") == 0
        assert value(samples, "jsworker_worker_restarts_total", reason="jobs") >= len(retired)
        # The processes still running hang at exit too: stopping the fleet kills them, and
        # since each had stopped cleanly first, the supervisor exits 0.
        assert stop(proc, timeout=GRACE + EXIT_DEADLINE + 20) == 0
    finally:
        stop(proc, timeout=5)
        _kill_leftovers(log, record, hung_app.MARKER)


@pytest.mark.timeout(120)
def test_on_sigterm_processes_that_cannot_exit_are_killed_with_their_children(
    nats_server: NatsServer, hung_app: ModuleType, workers: Workers
) -> None:
    """SIGTERM to a fleet of two processes that hang at exit: both stop cleanly, are killed
    with their children :data:`EXIT_DEADLINE` after, and the supervisor exits 0 within
    grace + deadline (not grace + 15 s, and not 1, with the children left behind)."""
    fleet = workers.start(
        nats_server.url, "fleet", "--processes", "2", "--grace", str(GRACE), "-c", "1",
        module=MODULE, env=HANG,
    )  # fmt: skip
    try:
        wait_until(
            lambda: (
                len(_named(fleet.log, "fleet.process_ready")),
                sum(map(len, _children(workers.record).values())),
            ),
            until=lambda seen: seen == (2, 4),
            timeout=60,
            message="two processes ready, with two children each",
        )
        pids = [int(e["pid"]) for e in _named(fleet.log, "fleet.process_started")]
        children = [c for cs in _children(workers.record).values() for c in cs]
        began = time.monotonic()
        fleet.proc.send_signal(signal.SIGTERM)
        # Today's bound without a deadline after the stop: grace + 15 s, then exit 1.
        code = fleet.proc.wait(GRACE + 15 + 2 * MARGIN)
        took = time.monotonic() - began
        assert code == 0, fleet.tail()
        assert took <= GRACE + EXIT_DEADLINE + MARGIN, took
        killed = _named(fleet.log, "fleet.process_killed")
        assert sorted(int(e["pid"]) for e in killed) == sorted(pids)
        assert all(e["level"] == "warning" and e["reason"] == "exit" for e in killed), killed
        assert sorted(c for e in killed for c in e["children"]) == sorted(children)
        assert _alive(pids) == []
        wait_until(lambda: _alive(children), until=lambda left: not left, timeout=5, message="children gone")
    finally:
        fleet.terminate(timeout=5)
        _kill_leftovers(fleet.log, workers.record, hung_app.MARKER)


@pytest.mark.timeout(120)
def test_a_process_that_dies_takes_the_processes_of_its_group_with_it(
    nats_server: NatsServer, hung_app: ModuleType, tmp_path: Path
) -> None:
    """kill -9 of a fleet's worker process (as an OOM kill or a segfault ends one): the child
    it started in its process group (as a process pool's are) is killed by the supervisor at
    once instead of computing on under init, and the kill is logged. A child in a session of
    its own is out of reach once its parent is gone: left (and killed here by the test)."""
    record, log = tmp_path / "record.log", tmp_path / "fleet.log"
    env = {**worker_env(nats_server.url, record), **HANG}
    proc, _ = start_metrics_worker(
        env, log, MODULE, "--processes", "2", "--log-format", "json", "--log-level", "info"
    )
    try:
        first = wait_until(
            lambda: _named(log, "fleet.process_ready"), timeout=60, message="a worker process ready"
        )[0]
        pid = int(first["pid"])
        children: list[int] = wait_until(
            lambda: _children(record).get(pid, []), until=lambda found: len(found) == 2, timeout=30
        )
        in_group = [child for child in children if os.getpgid(child) == pid]
        assert len(in_group) == 1, children
        os.kill(pid, signal.SIGKILL)
        wait_until(partial(_gone, in_group[0]), timeout=10, message=f"child {in_group[0]} gone")
        killed = wait_until(
            lambda: _named(log, "fleet.orphans_killed"), timeout=10, message="the kill logged"
        )
        assert killed[0]["pid"] == pid and killed[0]["orphans"] == in_group
        assert proc.poll() is None  # the fleet goes on: the process is started again
    finally:
        stop(proc, timeout=5)
        _kill_leftovers(log, record, hung_app.MARKER)
