"""Sync tasks that run in the worker's process pool (``executor="process"``).

Tasks that must be stopped from outside write the pid of the process running them to the
file they are given, then never return on their own.
"""

from __future__ import annotations

import os
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from jsworker import App, Retry, current_job

app = App("proc")


class Unlucky(Exception):
    """Never retried by :func:`unlucky`'s task."""


def _announce(pidfile: str) -> None:
    path = Path(pidfile)
    path.with_suffix(".tmp").write_text(str(os.getpid()))
    path.with_suffix(".tmp").replace(path)  # whole, or not there yet


@app.task(executor="process", store_result=True)
def whoami() -> int:
    """The pid of the process that ran it."""
    return os.getpid()


@app.task(executor="process", store_result=True)
def combine(
    values: list[int], factor: int = 1, *, label: str, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Positional, default, keyword-only and nested arguments, all sent back."""
    return {"total": sum(values) * factor, "label": label, "extra": extra}


@app.task(executor="process", store_result=True)
def later(when: datetime, by: timedelta) -> str:
    """Annotated arguments arrive converted to their types in the process."""
    assert isinstance(when, datetime) and isinstance(by, timedelta)
    return (when + by).isoformat()


@app.task(executor="process", store_result=True)
def whereami() -> dict[str, Any]:
    """What current_job() says in the process."""
    job = current_job()
    return {
        "id": job.id,
        "task": job.task,
        "queue": job.queue,
        "attempt": job.attempt,
        "cancelled": job.cancelled,
    }


@app.task(executor="process", store_result=True, max_retries=0)
def explode(n: int) -> None:
    """Fails at once (no retries)."""
    raise ValueError(f"explode {n}")


@app.task(executor="process", store_result=True, max_retries=3, retry_backoff=30, dont_retry_on=(Unlucky,))
def unlucky() -> None:
    """Raises an exception its task never retries: dead-lettered after one attempt."""
    raise Unlucky("not today")


@app.task(executor="process", store_result=True, max_retries=2)
def flaky() -> int:
    """Asks for a retry on its first attempt; the attempt it succeeded on."""
    attempt = current_job().attempt
    if attempt == 1:
        raise Retry(delay=0, reason="first attempt")
    return attempt


@app.task(executor="process", store_result=True)
def unencodable() -> object:
    """Returns what JSON cannot hold."""
    return {1, 2}


@app.task(executor="process", store_result=True, max_retries=1, retry_backoff=0)
def vanish() -> None:
    """Its process ends under it."""
    os._exit(3)


@app.task(executor="process", store_result=True, timeout=0.5, max_retries=0)
def spin(pidfile: str) -> None:
    """CPU-bound and endless: stopped only by its timeout."""
    _announce(pidfile)
    n = 0
    while True:
        n += 1


@app.task(executor="process", store_result=True)
def hold(pidfile: str) -> None:
    """Endless, without a timeout: stopped only by a cancel."""
    _announce(pidfile)
    threading.Event().wait()  # never set: only the process's end stops it


# What hoard() keeps: memory a task process holds from one job to the next, as a leak does.
_HOARD: list[bytearray] = []


@app.task(executor="process", store_result=True)
def hoard(mib: int) -> int:
    """Keep ``mib`` MiB more in this process (written, so resident); its pid."""
    _HOARD.append(bytearray(b"x" * (mib * 2**20)))
    return os.getpid()
