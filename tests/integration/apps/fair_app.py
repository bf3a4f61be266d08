"""A fair queue for tests/integration/test_fair.py: each run records its start (job id,
account) and waits while the file named in ``gate`` does not exist."""

from __future__ import annotations

import asyncio
import os

from jsworker import App, current_job
from jsworker.testing import append_record

app = App("fairly")
app.queue("emails", fair=True)


@app.task(queue="emails", partition_key=lambda account, **_: account)
async def send(account: str, gate: str = "") -> None:
    """Records its start, then runs until the file ``gate`` exists when one is named."""
    append_record(f"start {current_job().id} {account}\n")
    while gate and not os.path.exists(gate):  # noqa: ASYNC240
        await asyncio.sleep(0.02)


@app.task(queue="emails")
async def tidy() -> None:
    """A task without a partition key: its jobs are one partition, named by the task."""
    append_record(f"start {current_job().id} tidy\n")
