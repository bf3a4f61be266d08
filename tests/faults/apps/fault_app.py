"""Tasks the fault tests run in real ``jsworker run`` processes.

Every execution appends ``<event> <job id> <task> <pid> <attempt> <monotonic time>`` to the
file named by ``JSW_TEST_RECORD`` (``start`` before the work, ``done`` after it). One short
``O_APPEND`` write is atomic, so several worker processes can share the file, and a worker
killed mid-job leaves either a whole line or none. ``time.monotonic()`` is the system-wide
``CLOCK_MONOTONIC`` on Linux, so the test process can compare it with its own clock.

The cluster tests give the workers ``JSWORKER_REPLICAS=3``, as a deployment does.
"""

from __future__ import annotations

import asyncio
import os
import signal

from jsworker import App
from jsworker.testing import record_execution as record

# ack_wait=2 on every task: a queue's ack_wait is the largest of its tasks', and a short one
# makes the server redeliver a dead worker's jobs within seconds instead of 30 s.
app = App("flt", ack_wait=2)


@app.task
async def work(n: int, ms: float) -> int:
    """A job that waits ``ms`` milliseconds: many of them are in flight at once."""
    record("start")
    await asyncio.sleep(ms / 1000)
    record("done")
    return n


# The ordinary jobs beside jobs that kill their worker: each crash costs every job the dying
# worker held one of its max_crashes, and on a loaded machine one can sit in a worker's hands
# through all six crashes of that test (two killers, max_crashes + 1 runs each).
@app.task(max_crashes=6)
async def bystander(n: int, ms: float) -> int:
    """A job that waits ``ms`` milliseconds in a worker that something else may kill."""
    record("start")
    await asyncio.sleep(ms / 1000)
    record("done")
    return n


@app.task(dont_retry_on=(TypeError,))
async def typed(n: int) -> int:
    """Checks its argument's type: a wrong one is a TypeError, which is never retried."""
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"n must be an int, not {type(n).__name__}")
    record("done")
    return n


@app.task
def blob(data: str) -> int:
    """Takes a large argument (a job near the server's max_payload)."""
    record("done")
    return len(data)


@app.task(queue="other")
async def elsewhere(n: int) -> int:
    """A task of another queue: its jobs must only ever run from that queue."""
    record("done")
    return n


# A job that kills its worker every time. ack_wait=1 on its own queue: after each crash the
# server hands it out again within a second. No retries for failures: crashes have a limit of
# their own.
@app.task(queue="poison", max_retries=0, max_crashes=2, ack_wait=1)
def exit_worker(n: int) -> None:
    """Ends the worker process at once from a worker thread (no cleanup, exit code 1)."""
    record("start")
    os._exit(1)


@app.task(queue="poison", max_retries=0, max_crashes=2, ack_wait=1)
async def kill_worker(n: int) -> None:
    """SIGKILLs the worker process it runs in, from the event loop."""
    record("start")
    os.kill(os.getpid(), signal.SIGKILL)
    await asyncio.sleep(10)  # the signal arrives before this ends
