"""Task processes (``executor="process"``) replaced after so many jobs, or once they hold so
much memory (Celery's ``worker_max_tasks_per_child`` and ``worker_max_memory_per_child``), in a
real ``jsworker run`` with one task process; jobs are sent one after the other."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from jsworker import Job
from jsworker.testing import NatsServer

from .workers import APPS, start_worker, stop

sys.path.insert(0, str(APPS))
import process_app


def _pids_with(url: str, tmp_path: Path, flags: list[str], send: Callable[[], Job], jobs: int) -> list[int]:
    """The pid each of ``jobs`` jobs ran in, under a worker started with ``flags``."""
    process_app.app.servers = [url]
    proc = start_worker(
        url, tmp_path / "record", tmp_path / "worker.log", "--task-processes", "1", *flags,
        module="process_app",
    )  # fmt: skip
    try:
        return [send().result(timeout=30) for _ in range(jobs)]
    finally:
        stop(proc)
        process_app.app.close()


def test_a_task_process_is_replaced_after_its_jobs(nats_server: NatsServer, tmp_path: Path) -> None:
    pids = _pids_with(
        nats_server.url, tmp_path, ["--max-jobs-per-task-process", "2"], process_app.whoami.delay, 5
    )
    # Two jobs a process: 1 and 2 in one, 3 and 4 in the next, 5 in a third.
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4], pids
    assert len(set(pids)) == 3


def test_a_task_process_is_replaced_once_it_holds_too_much(nats_server: NatsServer, tmp_path: Path) -> None:
    # Each job keeps 40 MiB more: past 100 MiB after the second or third, its process goes.
    pids = _pids_with(
        nats_server.url,
        tmp_path,
        ["--max-memory-per-task-process", "100"],
        lambda: process_app.hoard.delay(40),
        6,
    )
    runs = [pids.count(pid) for pid in dict.fromkeys(pids)]
    assert len(runs) >= 2 and all(n <= 3 for n in runs), pids
