"""Fixed-size timing records: one ``os.write`` per job from any process, read by the driver.

A record is three little-endian int64: a key (the job's index), the enqueue time in unix ns
(0 when not known) and the time the record was written, in unix ns. A single ``write`` of
24 bytes to an ``O_APPEND`` file is atomic across processes, threads and tasks, and costs a
few microseconds, so recording does not disturb what is measured. Only the standard
library is used: peer task queues import this module from their own virtualenv.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable

RECORD = struct.Struct("<qqq")
ENV = "BENCH_RECORD_FILE"
POLL = 0.005

_fd: int | None = None
_pid: int | None = None


def record(key: int, enqueued_ns: int = 0) -> None:
    """Append one record stamped now to the file named by ``$BENCH_RECORD_FILE``."""
    global _fd, _pid
    if _pid != os.getpid():
        # Opened per process: a forked child must not share the parent's descriptor state.
        _fd = os.open(os.environ[ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _pid = os.getpid()
    assert _fd is not None
    os.write(_fd, RECORD.pack(key, enqueued_ns, time.time_ns()))


def count(path: str) -> int:
    """Number of complete records in ``path`` (0 if it does not exist yet)."""
    try:
        return os.stat(path).st_size // RECORD.size
    except FileNotFoundError:
        return 0


def read(path: str) -> list[tuple[int, int, int]]:
    """Every complete record of ``path`` as ``(key, enqueued_ns, at_ns)``."""
    with open(path, "rb") as f:
        data = f.read()
    usable = len(data) - len(data) % RECORD.size
    return list(RECORD.iter_unpack(data[:usable]))


def wait_for(path: str, n: int, timeout: float, alive: Callable[[], bool] | None = None) -> int:
    """Wait until ``path`` holds ``n`` records; the count reached.

    Stops early when ``alive()`` says the producing process is gone, and after ``timeout``
    seconds in any case. The caller decides whether a short count is an error.
    """
    deadline = time.monotonic() + timeout
    got = count(path)
    while got < n and time.monotonic() < deadline:
        if alive is not None and not alive():
            break
        time.sleep(POLL)
        got = count(path)
    return got


def span_rate(rows: list[tuple[int, int, int]]) -> float:
    """Jobs per second between the first and the last record (the first one starts the clock)."""
    if len(rows) < 2:
        raise ValueError("need at least two records for a rate")
    stamps = [r[2] for r in rows]
    elapsed = (max(stamps) - min(stamps)) / 1e9
    return (len(rows) - 1) / max(elapsed, 1e-9)


def overlap_rate(rows: list[tuple[int, int, int]]) -> float:
    """Jobs per second while every process was working, for records whose middle field is the
    writer's pid (see :func:`record_pid`).

    The window runs from the latest first record of any process to the earliest last one, so
    a process that started late (or ran out of jobs early) does not count as a slow one. With
    one process this is :func:`span_rate`.
    """
    by_pid: dict[int, list[int]] = {}
    for _, pid, at in rows:
        by_pid.setdefault(pid, []).append(at)
    if len(by_pid) < 2:
        return span_rate(rows)
    start = max(min(stamps) for stamps in by_pid.values())
    end = min(max(stamps) for stamps in by_pid.values())
    inside = sum(1 for _, _, at in rows if start <= at <= end)
    if end <= start or inside < 2:
        raise ValueError("the processes did not work at the same time; no overlap to measure")
    return (inside - 1) / ((end - start) / 1e9)


def record_pid(key: int) -> None:
    """:func:`record` with the writing process's pid in place of the enqueue time."""
    record(key, os.getpid())


def record_cpu(key: int) -> None:
    """:func:`record` with the writing process's CPU time so far (ns, all its threads) in place
    of the enqueue time."""
    record(key, time.process_time_ns())


def cpu_per_job(rows: list[tuple[int, int, int]]) -> float:
    """Microseconds of CPU per job between the first and the last record, for records of one
    process whose middle field is its CPU time (see :func:`record_cpu`)."""
    if len(rows) < 2:
        raise ValueError("need at least two records for a CPU cost")
    cpu = [r[1] for r in rows]
    return (max(cpu) - min(cpu)) / 1e3 / (len(rows) - 1)
