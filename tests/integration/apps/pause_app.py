"""Jobs for tests/integration/test_pause_workers.py: each run records its start and end and
waits while the file named in ``gate`` does not exist."""

from __future__ import annotations

import asyncio
import os

from jsworker import App, current_job
from jsworker.testing import append_record

app = App("pausing")


@app.task
async def hold(gate: str = "") -> None:
    """Records its start, runs until the file ``gate`` exists (when named), records its end."""
    append_record(f"start {current_job().id} {os.getpid()}\n")
    while gate and not os.path.exists(gate):  # noqa: ASYNC240
        await asyncio.sleep(0.02)
    append_record(f"end {current_job().id} {os.getpid()}\n")
