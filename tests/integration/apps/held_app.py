"""Limited tasks beside a quick one, for tests/integration/test_held_back.py: each run records
its start (wall clock) and its end, so the test can see which queue ran while the limited
jobs waited."""

from __future__ import annotations

import asyncio

from jsworker import App
from jsworker.testing import record_execution

app = App("heldback")

#: The rate-limited task's limit.
RATE = "5/s"


@app.task(queue="limited", rate_limit=RATE)
async def rated(i: int) -> None:
    """Limited by its own rate: more of its jobs wait than may start."""
    record_execution("start")
    record_execution("done")


@app.task(queue="limited", partition_key=lambda account, **_: account, max_running_per_partition=1)
async def parted(account: str, i: int) -> None:
    """One job of an account at a time: long enough that the others of its account wait."""
    record_execution("start")
    # A run of 50 ms is what is measured: the test reads each run's span (no two overlap), and
    # a run of no length could overlap nothing. No event stands for that span.
    await asyncio.sleep(0.05)
    record_execution("done")


@app.task(queue="other")
async def quick(i: int) -> None:
    """A job of another queue, which the limited jobs must not keep waiting."""
    record_execution("start")
    record_execution("done")
