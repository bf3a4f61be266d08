"""The app the dashboard's browser tests drive: work on two queues, a task that fails while a
file exists (a dead letter to replay), one that waits for a retry."""

from __future__ import annotations

import asyncio
import os

from jsworker import App, Reject, Retry
from jsworker.testing import record_execution as record

app = App("uiapp")
app.queue("other")


@app.task
async def work(n: int) -> None:
    """A short job."""
    await asyncio.sleep(0.02)
    record("done")


@app.task(queue="other")
async def elsewhere(n: int) -> None:
    """A job of the other queue."""
    record("done")


@app.task
def charge(order: int) -> None:
    """Dead-lettered at once while the file named by ``JSW_TEST_BROKEN`` exists."""
    if os.path.exists(os.environ.get("JSW_TEST_BROKEN", "")):
        raise Reject(f"order {order} cannot be charged")
    record("done")


@app.task(max_retries=3)
async def later() -> None:
    """Waits for a retry a long way off."""
    raise Retry(600, reason="the warehouse is closed")
