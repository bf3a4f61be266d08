"""Tasks that fail while a "bug" is present, for the dead-letter tests.

The bug is present while the file named by ``JSW_TEST_BROKEN`` exists: deleting it is the fix
that makes a replay succeed. Every successful execution appends
``done <job id> <task> <pid> <attempt>`` to the file named by ``JSW_TEST_RECORD``.
"""

from __future__ import annotations

import os

from jsworker import App, Reject
from jsworker.testing import record_execution as record

app = App("dlq")


def broken() -> bool:
    """True while the bug is present."""
    path = os.environ.get("JSW_TEST_BROKEN", "")
    return bool(path) and os.path.exists(path)


@app.task
async def charge(order: int) -> None:
    """Rejected (dead-lettered at once) while broken."""
    if broken():
        raise Reject(f"order {order} cannot be charged")
    record("done")


@app.task(queue="emails", max_retries=0)
def notify(to: str) -> None:
    """Raises while broken; with no retries that dead-letters it after one attempt."""
    if broken():
        raise RuntimeError(f"smtp down for {to}")
    record("done")
