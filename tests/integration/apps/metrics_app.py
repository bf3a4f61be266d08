"""Tasks with known outcomes, for checking the worker's metrics to the unit."""

from __future__ import annotations

import asyncio

from jsworker import App, Reject, Retry, current_job

app = App("met")


@app.task
async def ok() -> None:
    """Succeeds."""


@app.task
async def flaky() -> None:
    """Asks for one retry, then succeeds."""
    if current_job().attempt == 1:
        raise Retry(delay=0.1)


@app.task(timeout=0.2, max_retries=1, retry_backoff=0.1)
async def slow() -> None:
    """Times out on both of its attempts, then is dead-lettered."""
    await asyncio.sleep(2)


@app.task
async def refuse() -> None:
    """Rejected at once."""
    raise Reject("not today")
