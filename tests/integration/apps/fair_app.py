"""A fair queue for tests/integration/test_fair.py: each run records its start (job id,
account)."""

from __future__ import annotations

from jsworker import App, current_job
from jsworker.testing import append_record

app = App("fairly")
app.queue("emails", fair=True)


@app.task(queue="emails", partition_key=lambda account, **_: account)
async def send(account: str) -> None:
    """Records its start."""
    append_record(f"start {current_job().id} {account}\n")


@app.task(queue="emails")
async def tidy() -> None:
    """A task without a partition key: its jobs are one partition, named by the task."""
    append_record(f"start {current_job().id} tidy\n")
