"""Rate-limited tasks for tests/integration/test_rate_limits.py: each run records when it
started (wall clock), so the test can count starts per second across worker processes."""

from __future__ import annotations

import os
import time

from jsworker import App, current_job
from jsworker.testing import append_record

app = App("rated")
app.queue("mail", rate_limit="20/s")


def _started() -> None:
    job = current_job()
    append_record(f"wall {job.id} {job.task} {os.getpid()} {job.attempt} {time.time():.6f}\n")


@app.task(queue="mail")
async def emails(i: int) -> None:
    """Limited by its queue: held back before any worker takes it."""
    _started()


@app.task(rate_limit="10/s")
async def reports(i: int) -> None:
    """Limited itself: a job waits for its turn in its worker's slot."""
    _started()
