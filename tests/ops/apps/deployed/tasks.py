"""The app of tests/ops/test_deployment.py, run by workers started as the worker image starts them.

This directory plays the image's ``/app``: it is the workers' only PYTHONPATH entry and the module
is ``tasks``, compose's ``JSWORKER_APP``. The app is named ``quickstart`` because the users of
deploy/nats/auth.conf may only touch that app's subjects (any task of it).

``deliver`` records each run with :func:`jsworker.testing.record_execution` (the file named by
``JSW_TEST_RECORD``), so the test counts runs per job id: an enqueued id never recorded is a lost
job, one recorded twice ran twice. The others give the dashboard and the alerts every outcome.
"""

from __future__ import annotations

import asyncio

from jsworker import App, current_job
from jsworker.testing import record_execution

app = App("quickstart", events=True)


@app.task
async def deliver(n: int) -> None:
    """Succeeds, recording its run."""
    record_execution("done")


@app.task(max_retries=0)
async def doomed(n: int) -> None:
    """Fails with no retry left: dead-lettered at once (outcome failed)."""
    raise RuntimeError(f"job {n} always fails")


@app.task(max_retries=1, retry_backoff=0.1)
async def flaky(n: int) -> None:
    """Fails on its first attempt (retried), succeeds on the second."""
    if current_job().attempt == 1:
        raise RuntimeError("first attempt fails")


@app.task(timeout=0.2, max_retries=0)
async def slow(n: int) -> None:
    """Waits for something that never happens, so its timeout ends it with no retry left:
    dead-lettered (outcome timed_out)."""
    await asyncio.Event().wait()
