"""Quickstart tasks: one async, one sync, one that asks for a retry once."""

from __future__ import annotations

import asyncio
import time

import structlog

from jsworker import App, Retry, current_job

app = App("quickstart", events=True)  # job events: what happened to every job, as a stream
log = structlog.get_logger("quickstart")


@app.task
async def resize_image(path: str, width: int) -> str:
    """An async task: runs on the worker's event loop."""
    await asyncio.sleep(0.2)  # pretend to do I/O
    log.info("resized", path=path, width=width)  # carries the job id: the worker binds it
    return f"{path}@{width}"


@app.task(queue="emails", max_retries=5)
def send_email(to: str, subject: str) -> None:
    """A sync task: runs in the worker's thread pool."""
    time.sleep(0.1)
    log.info("sent", to=to, subject=subject)


@app.task
async def flaky_report(day: str) -> None:
    """Fails on its first attempt, succeeds on the retry."""
    if current_job().attempt == 1:
        raise Retry(delay=0.5, reason="upstream not ready")
    log.info("report built", day=day)
