"""The task of the cancel-under-load test: many short jobs, each recording its start (with
:func:`jsworker.testing.record_execution`), and job events on, so that the test sees each
success as the worker settles it."""

from __future__ import annotations

import asyncio

from jsworker import App
from jsworker.testing import record_execution as record

app = App("truth", events=True)


@app.task
async def quick(n: int) -> int:
    """A short job that keeps no result: a finished one leaves no record a cancel could lose to."""
    record("start")
    await asyncio.sleep(0.02)
    return n
