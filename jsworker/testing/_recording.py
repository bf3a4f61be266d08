"""Recording which jobs ran, across worker processes, for tests that count executions."""

from __future__ import annotations

import os
import time
from typing import NamedTuple

from .._enqueue.receipt import current_job

RECORD_ENV = "JSW_TEST_RECORD"
"""Environment variable naming the file :func:`record_execution` appends to."""


class Execution(NamedTuple):
    """One recorded line."""

    event: str
    job_id: str
    task: str
    pid: int
    attempt: int
    at: float  # time.monotonic() of the recording process


def record_execution(event: str, path: str | None = None) -> None:
    """From inside a task: append ``<event> <job id> <task> <pid> <attempt> <monotonic>``.

    The file is ``path`` or the one ``JSW_TEST_RECORD`` names. One short ``O_APPEND`` write
    is atomic, so every worker process of a test can share the file; counting ``done`` lines
    per job id then shows jobs lost (none) or run twice.
    """
    job = current_job()
    append_record(f"{event} {job.id} {job.task} {os.getpid()} {job.attempt} {time.monotonic():.6f}\n", path)


def append_record(line: str, path: str | None = None) -> None:
    """Append ``line`` to ``path`` (or the file ``JSW_TEST_RECORD`` names) in one ``O_APPEND``
    write, atomic for a short line: lines of other shapes that several processes add to the
    same record file (the parsers skip what they do not know)."""
    fd = os.open(path or os.environ[RECORD_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def parse_execution(line: str) -> Execution | None:
    """One line written by :func:`record_execution`, or None for anything else."""
    parts = line.split()
    if len(parts) != 6:
        return None
    try:
        return Execution(parts[0], parts[1], parts[2], int(parts[3]), int(parts[4]), float(parts[5]))
    except ValueError:
        return None
