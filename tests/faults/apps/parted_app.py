"""A plain task on a queue spread over four job streams (``App(partitions=4)``), for the fault
tests of partitions; it records each execution as :mod:`fault_app` does."""

from __future__ import annotations

import asyncio

from jsworker import App
from jsworker.testing import record_execution as record

PARTITIONS = 4

# ack_wait=2: a job whose acknowledgement a killed leader lost comes back within seconds.
app = App("prt", ack_wait=2, partitions=PARTITIONS)


@app.task
async def work(n: int, ms: float) -> int:
    """A job that waits ``ms`` milliseconds."""
    record("start")
    await asyncio.sleep(ms / 1000)
    record("done")
    return n
