"""An app with two middlewares and start/stop hooks, for the seam tests.

Each middleware stamps a header on every enqueue and writes what it sees of runs to the
file named by ``JSW_TEST_RECORD`` when that is set (worker processes), else to
:data:`SEEN` (in-process workers). Start and stop hooks record themselves the same way.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from jsworker import App, Reject, current_job
from jsworker._core.middleware import Middleware, OutgoingJob, Settled
from jsworker.testing import append_record

#: What the middlewares and hooks saw in this process, in order.
SEEN: list[tuple[str, ...]] = []


def note(*fields: str) -> None:
    """Remember ``fields`` in this process, and in the shared record file when there is one."""
    SEEN.append(fields)
    if os.environ.get("JSW_TEST_RECORD"):
        append_record(" ".join((*fields, str(os.getpid()))) + "\n")


class Stamp(Middleware):
    """Stamps ``X-Stamp-<name>`` with the enqueue's kind, and notes runs and their ends."""

    def __init__(self, name: str) -> None:
        self.name = name

    def on_enqueue(self, job: OutgoingJob) -> None:
        job.headers[f"X-Stamp-{self.name}"] = job.kind

    async def around_run(self, job: Any, call_next: Callable[[], Awaitable[Any]]) -> Any:
        note("enter", self.name, job.id)
        try:
            return await call_next()
        finally:
            note("leave", self.name, job.id)

    async def on_settled(self, job: Any, settled: Settled) -> None:
        if self.name == "outer":
            note("settled", job.id, settled.state)


app = App("mw", middleware=[Stamp("outer"), Stamp("inner")], max_retries=1, retry_backoff=0.05)


@app.on_startup
async def open_pool() -> None:
    app.state.pool = f"pool-{os.getpid()}"
    note("startup")


@app.on_shutdown
def close_pool() -> None:
    note("shutdown", str(app.state.pool))


@app.task(store_result=True)
async def stamps() -> dict[str, str]:
    """The stamps its job carries, and the start hook's pool."""
    headers = current_job().headers
    return {
        **{k: v for k, v in headers.items() if k.startswith("X-Stamp-")},
        "pool": app.state.get("pool", str),
    }


@app.task
def sync_ok() -> None:
    note("ran", current_job().id)


@app.task(executor="process")
def in_process() -> int:
    return os.getpid()


@app.task
async def flaky() -> None:
    if current_job().attempt == 1:
        raise ValueError("first attempt fails")


@app.task
async def refused() -> None:
    raise Reject("never")


@app.task(queue="held")
async def held(path: str) -> None:
    await asyncio.to_thread(Path(path).write_text, "started")
    await asyncio.Event().wait()  # until cancelled


@app.task
async def plain() -> None:
    """Enqueued with a short expiry while no worker runs."""


if os.environ.get("MW_FAIL_STARTUP"):

    @app.on_startup
    def no_database() -> None:
        raise ConnectionRefusedError("no database today")
