"""An app run by users that hold only the permissions `jsworker permissions perm` prints."""

from __future__ import annotations

from jsworker import App, Reject
from jsworker.testing import record_execution as record

app = App("perm", events=True)


@app.task
async def add(a: int, b: int) -> int:
    record("done")
    return a + b


@app.task(max_retries=0)
async def refuse() -> None:
    record("done")
    raise Reject("refused on purpose")
