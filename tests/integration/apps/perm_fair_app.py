"""App ``perm`` with a fair queue, run by a worker holding only the permissions
`jsworker permissions perm` prints (tests/integration/test_attacks.py)."""

from __future__ import annotations

from jsworker import App
from jsworker.testing import record_execution as record

app = App("perm")
app.queue("turns", fair=True)


@app.task(queue="turns", partition_key=lambda account, **_: account, store_result=True)
async def visit(account: str) -> str:
    record("done")
    return account
