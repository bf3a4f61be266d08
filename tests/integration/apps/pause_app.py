"""Jobs for tests/integration/test_pause_workers.py: each run records its start and end and
waits while the file named in ``gate`` does not exist."""

from __future__ import annotations

import os

from jsworker import App, current_job
from jsworker.testing import append_record
from tests.support import wait_until_async

app = App("pausing")


@app.task
async def hold(gate: str = "") -> None:
    """Records its start, runs until the file ``gate`` exists (when named), records its end."""
    append_record(f"start {current_job().id} {os.getpid()}\n")
    if gate:
        await wait_until_async(lambda: os.path.exists(gate), timeout=120, message=f"the gate {gate}")
    append_record(f"end {current_job().id} {os.getpid()}\n")
