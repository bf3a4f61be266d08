"""Tasks the fleet tests run in ``jsworker run --processes N``.

Every execution appends ``<event> <job id> <task> <pid>`` to the file named by
``JSW_TEST_RECORD`` (one short line per append: several processes share the file).
"""

from __future__ import annotations

import asyncio

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


@app.task(queue="slow", ack_wait=5)
async def slow(seconds: float) -> None:
    record("start")
    await asyncio.sleep(seconds)
    record("done")


@app.task(queue="leaky")
async def leak(megabytes: int) -> None:
    _kept.append(bytearray(b"x") * (megabytes * 2**20))  # filled, so it is resident
    await asyncio.sleep(0.5)  # a job that takes a while, as leaking ones do
    record("done")
