"""An app for tests/integration/test_cli_enqueue.py: jobs enqueued from the command line."""

from __future__ import annotations

from jsworker import App

app = App("enq")
app.queue("paced", rate_limit="5/s")


@app.task
async def add(a: int, b: int = 0) -> int:
    return a + b


@app.task(queue="paced")
async def paced() -> None: ...
