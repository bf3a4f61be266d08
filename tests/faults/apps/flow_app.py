"""Tasks of the workflow fault tests. Each run records itself (``start``/``done`` lines in the
file ``JSW_TEST_RECORD`` names), so a test counts how often each step and callback ran.

``part`` stalls once, past its ack_wait, for the member whose marker file exists: it holds
its worker's event loop, so no heartbeat keeps the job, and the server delivers that member
again to another worker while the first still runs it; both end it. ``held`` waits until
its gate file exists, so the test decides when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path

from jsworker import App, current_job
from jsworker.testing import record_execution as record
from jsworker.workflows import group
from tests.support import wait_until

app = App("flw", workflows=True)


def _starts(job_id: str) -> int:
    """How many runs of ``job_id`` the record file shows started, in any worker process."""
    with open(os.environ["JSW_TEST_RECORD"]) as f:
        return sum(1 for line in f if line.startswith(f"start {job_id} "))


# A queue of its own: a queue's consumer takes the longest ack_wait of its tasks.
@app.task(queue="parts", ack_wait=1)
async def part(i: int, stall: str = "") -> int:
    record("start")
    marker = Path(stall) if stall else None
    if marker is not None and marker.exists():
        marker.unlink()
        # Blocking on purpose: the worker's heartbeats stop too, so the server redelivers it.
        # Held until the other copy has started (bounded, should the redelivery never come).
        job_id = current_job().id
        with contextlib.suppress(AssertionError):
            wait_until(lambda: _starts(job_id), until=lambda n: n >= 2, timeout=30)
    record("done")
    return i


@app.task(ack_wait=2)
async def held(i: int, gate: str) -> int:
    record("start")
    while not os.path.exists(gate):  # noqa: ASYNC240
        await asyncio.sleep(0.05)
    record("done")
    return i


@app.task(store_result=True)
async def gather(values: list[int]) -> int:
    record("done")
    return sum(values)


async def _start_groups(size: int) -> None:
    """Start groups of ``size`` members one after the other until killed."""
    n = 0
    while True:
        await group([part.s(i) for i in range(size)], id=f"g{n}").aapply()
        n += 1


if __name__ == "__main__":
    # A producer for the kill test: python flow_app.py SIZE
    asyncio.run(_start_groups(int(sys.argv[1])))
