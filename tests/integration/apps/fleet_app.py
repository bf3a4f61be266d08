"""Tasks the fleet tests run in ``jsworker run --processes N``.

Every execution appends ``<event> <job id> <task> <pid>`` to the file named by
``JSW_TEST_RECORD`` (one short line per append: several processes share the file). Held jobs
wait for a FIFO the test opens, so when a job ends is the test's decision, never a duration.
"""

from __future__ import annotations

from pathlib import Path

from jsworker import App, Reject
from jsworker.testing import record_execution as record

app = App("fleet")

# What the leaking task keeps: it never lets go, as a leak in real code would not.
_kept: list[bytearray] = []


# A short ack_wait: a job a stopping process could not hand back comes back soon.
@app.task(ack_wait=2)
async def ok(n: int) -> int:
    record("done")
    return n


@app.task(ack_wait=2)
async def boom(n: int) -> None:
    record("done")
    raise Reject(f"boom {n}")


@app.task(queue="held", ack_wait=30)
def held(gate: str) -> None:
    """Runs until the test opens ``gate``, a FIFO: reading it blocks until a writer opens it."""
    record("start")
    Path(gate).read_bytes()
    record("done")


@app.task(queue="leaky")
def leak(megabytes: int, gate: str) -> None:
    """Keeps ``megabytes`` more for good, then runs until the test opens ``gate`` (a FIFO)."""
    _kept.append(bytearray(b"x") * (megabytes * 2**20))  # filled, so it is resident
    record("start")
    Path(gate).read_bytes()
    record("done")
