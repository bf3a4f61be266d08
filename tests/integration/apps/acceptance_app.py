"""Tasks the worker acceptance tests run in real ``jsworker run`` processes.

Every execution appends ``<event> <job id> <task> <pid>`` to the file named by
``JSW_TEST_RECORD``; appends of one short line are atomic, so several worker processes can
share the file.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from jsworker import App, current_job
from jsworker.testing import record_execution as record

app = App("acc")


@app.task
async def record_async(n: int) -> int:
    record("done")
    return n


@app.task
def record_sync(n: int) -> int:
    record("done")
    return n


@app.task(queue="slow", ack_wait=1.5)
async def sleep_async(seconds: float) -> None:
    record("start")
    await asyncio.sleep(seconds)
    record("done")


@app.task(queue="slow", ack_wait=1.5)
def sleep_sync(seconds: float) -> None:
    record("start")
    time.sleep(seconds)
    record("done")


@app.task(queue="overrun", timeout=0.3, ack_wait=1.5, max_retries=1, retry_backoff=0)
def overrun_sync(gates: str) -> None:
    """Runs past its timeout until the test opens this attempt's gate: reading the FIFO
    ``<gates>/<attempt>`` blocks until the test opens it for writing and closes it."""
    record("start")
    (Path(gates) / str(current_job().attempt)).read_bytes()
    record("done")
