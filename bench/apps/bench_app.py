"""The jsworker app every jsworker figure runs: no-op, probe and sleeping tasks.

Each task writes one timing record (``lib.records``) and nothing else, so the figures
measure the framework rather than the work. Queues keep the figures apart: a worker is
always started with ``--queues`` naming only the queue its figure uses.
"""

from __future__ import annotations

import asyncio

from lib.records import record, record_pid

from jsworker import App, current_job

app = App("bench")

# The raw baselines consume this queue with their own durable consumer; no task uses it,
# so no jsworker worker ever pulls from it.
RAW_QUEUE = "rawq"


@app.task
async def noop_async(i: int) -> None:
    """Records that it ran, and in which worker process."""
    record_pid(i)


@app.task(queue="sync")
def noop_sync(i: int) -> None:
    """Records that it ran, in the worker's thread pool."""
    record(i)


@app.task(queue="lat")
async def probe(i: int) -> None:
    """Records its start next to the enqueue time the producer put in the job's headers."""
    enqueued = current_job().headers.get("Jsw-Enqueued-At")
    record(i, int(enqueued) if enqueued else 0)


@app.task(queue="sleepy")
async def sleep50(i: int) -> None:
    """Waits 50 ms, then records that it finished."""
    await asyncio.sleep(0.05)
    record(i)
