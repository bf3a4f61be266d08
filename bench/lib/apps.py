"""A benchmark app's own streams, seen from the driver: its connection, purges and counts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from jsworker import App

from .jetstream import connect


async def using(app: App, url: str, body: Callable[[], Awaitable[Any]]) -> Any:
    """``body()`` with ``app``'s producer on ``url``, its connection closed afterwards."""
    app.servers = [url]
    try:
        return await body()
    finally:
        await app.aclose()


async def purge(url: str, app: App) -> None:
    """Empty ``app``'s job stream and its jobs bucket (kept results)."""
    nc = await connect(url)
    try:
        js = nc.jetstream()
        for stream in (app.namespace.stream, app.namespace.jobs_stream):
            await js.purge_stream(stream)
    finally:
        await nc.close()


async def counts(url: str, app: App) -> tuple[int, int]:
    """(messages in ``app``'s job stream, records in its jobs bucket)."""
    nc = await connect(url)
    try:
        js = nc.jetstream()
        jobs = await js.stream_info(app.namespace.stream)
        kept = await js.stream_info(app.namespace.jobs_stream)
        return int(jobs.state.messages), int(kept.state.messages)
    finally:
        await nc.close()


def wait_counts(url: str, app: App, expected: tuple[int, int], timeout: float, what: str) -> None:
    """Wait (bounded) until :func:`counts` gives ``expected``; RuntimeError if it never does."""
    deadline = time.monotonic() + timeout
    found = asyncio.run(counts(url, app))
    while found != expected:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: {found} (jobs, records), not {expected}")
        time.sleep(0.05)
        found = asyncio.run(counts(url, app))
