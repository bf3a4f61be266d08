"""An app declaring a periodic schedule, run by ``jsworker run`` and ``jsworker schedules``
against servers older than the schedule features (tests/integration/test_server_versions.py).

Every execution appends a line to the file named by ``JSW_TEST_RECORD``.
"""

from __future__ import annotations

from jsworker import App
from jsworker.testing import record_execution as record

app = App("versions")


@app.task(cron="0 7 * * *")
async def morning_report() -> None:
    """Periodic: declared, so a worker tries to install its schedule at start."""
    record("done")


@app.task
async def now(n: int) -> int:
    """An ordinary job, which runs on any server."""
    record("done")
    return n
