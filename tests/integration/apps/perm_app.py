"""An app run by users that hold only the permissions `jsworker permissions perm` prints."""

from __future__ import annotations

import asyncio

import anyio

from jsworker import App, Reject, Retry
from jsworker.testing import record_execution as record

app = App("perm", events=True)


@app.task(store_result=True)
async def add(a: int, b: int) -> int:
    record("done")
    return a + b


@app.task(max_retries=0)
async def refuse() -> None:
    record("done")
    raise Reject("refused on purpose")


@app.task(max_retries=3)
async def not_yet() -> None:
    """Waits out a long retry: a retrying job to look at, run now or cancel."""
    raise Retry(600, reason="not yet")


# One job at a time on "gated": a second one waits queued behind a held one.
app.queue("gated", max_running=1)


@app.task(queue="gated", store_result=True)
async def hold(gate: str) -> str:
    """Runs until the file ``gate`` exists."""
    record("started")
    while not await anyio.Path(gate).exists():
        await asyncio.sleep(0.01)
    record("done")
    return "real"


@app.task(queue="gated", unique=True, store_result=True)
async def hold_once(gate: str) -> str:
    """:func:`hold`, one job at a time per gate."""
    return await hold(gate)
