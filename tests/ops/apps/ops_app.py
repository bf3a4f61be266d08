"""Tasks that produce every outcome the dashboard and the alerts show, for tests/ops.

One run of each task gives: successes on two queues, a failure that is retried, a timeout and a
rejection that are dead-lettered, a failure that is dead-lettered at once, and a blocked event
loop. ``plan`` makes the worker a producer of delayed jobs: it schedules one ``later`` job, which
the server fires, and cancels a second.
"""

from __future__ import annotations

import asyncio
import time

from jsworker import App, Reject, current_job

app = App("ops")


@app.task
async def ok() -> None:
    """Succeeds."""


@app.task(queue="reports")
async def report() -> None:
    """Succeeds on a second queue, so the dashboard's queue variable has two values."""
    await asyncio.sleep(0.05)


@app.task(max_retries=1, retry_backoff=0.1)
async def flaky() -> None:
    """Fails (raises) on its first attempt, which is retried; succeeds on the second."""
    if current_job().attempt == 1:
        raise RuntimeError("first attempt fails")


@app.task(timeout=0.2, max_retries=0)
async def slow() -> None:
    """Times out; no attempts left, so it is dead-lettered (outcome timed_out)."""
    await asyncio.sleep(5)


@app.task
async def refuse() -> None:
    """Rejected at once: dead-lettered (outcome rejected)."""
    raise Reject("not today")


@app.task(max_retries=0)
async def broken() -> None:
    """Raises with no attempts left: dead-lettered (outcome failed)."""
    raise ValueError("always broken")


@app.task
async def blocker() -> None:
    """Blocks the worker's event loop on purpose, longer than its 1 s warning threshold."""
    time.sleep(1.3)  # noqa: ASYNC251 - the blocking call is the point of this task


@app.task
async def later() -> None:
    """Succeeds; enqueued as a delayed job, so it runs when the server fires it."""


@app.task(max_retries=0)
async def plan() -> None:
    """Schedules ``later`` shortly and a second one far ahead, then cancels the second: the
    scheduled and cancelled counters are the producer's, and here the producer is scraped. No
    retry: a second run would schedule again and throw the test's counts off."""
    await later.aapply(countdown=0.5)
    doomed = await later.aapply(countdown=600)
    if not await app.acancel(doomed.id):
        raise RuntimeError(f"delayed job {doomed.id} could not be cancelled")
