"""Partitioned tasks for tests/integration/test_partitions.py: each run records its start and
end (wall clock), so the test can tell whether two jobs of one partition overlapped."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from jsworker import App, current_job
from jsworker.testing import append_record

app = App("parted")


def _mark(event: str, account: str) -> None:
    job = current_job()
    append_record(f"{event} {job.id} {account} {os.getpid()} {job.attempt} {time.time():.6f}\n")


@app.task(partition_key=lambda account, **_: account, max_running_per_partition=1)
async def visit(account: str, seconds: float, gate: str = "") -> None:
    """Runs ``seconds``, or until the file ``gate`` exists when one is named."""
    _mark("begin", account)
    if gate:
        while not os.path.exists(gate):  # noqa: ASYNC240
            await asyncio.sleep(0.05)
    else:
        await asyncio.sleep(seconds)
    _mark("end", account)


def _broken(account: Any) -> Any:
    return {"not": "a string"} if account == "dict" else 1 / 0


@app.task(partition_key=_broken, max_running_per_partition=1)
async def misfiled(account: str) -> None:
    """Its partition key is broken: the job is dead-lettered, never run."""
