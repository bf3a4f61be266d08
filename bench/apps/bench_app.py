"""The jsworker app every jsworker figure runs: no-op, probe and sleeping tasks.

Each task writes one timing record (``lib.records``) and nothing else, so the figures
measure the framework rather than the work. Queues keep the figures apart: a worker is
always started with ``--queues`` naming only the queue its figure uses.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from lib.records import record, record_cpu, record_pid

from jsworker import App, current_job

app = App("bench")

# The raw baselines consume this queue with their own durable consumer; no task uses it,
# so no jsworker worker ever pulls from it.
RAW_QUEUE = "rawq"


@app.task
async def noop_async(i: int) -> None:
    """Records that it ran, and in which worker process."""
    record_pid(i)


@app.task(queue="cpu")
async def noop_cpu(i: int) -> None:
    """Records that it ran, with its worker's CPU time so far: CPU per job."""
    record_cpu(i)


@app.task(queue="sync")
def noop_sync(i: int) -> None:
    """Records that it ran, in the worker's thread pool."""
    record(i)


@app.task(queue="lat")
async def probe(i: int) -> None:
    """Records its start next to the enqueue time the producer put in the job's headers."""
    enqueued = current_job().headers.get("Jsw-Enqueued-At")
    record(i, int(enqueued) if enqueued else 0)


@app.task(queue="sleepy")
async def sleep50(i: int) -> None:
    """Waits 50 ms, then records that it finished."""
    await asyncio.sleep(0.05)
    record(i)


# The cost of typed arguments: one task annotated with types JSON cannot hold, checked and
# encoded at enqueue and decoded back before the call, next to the same parameters without
# annotations (so arguments travel as they are). Each has its own queue so that a worker
# started for one never pulls the other's jobs.


@dataclass(frozen=True)
class Line:
    """A small dataclass argument: sent as a JSON object, rebuilt in the worker."""

    sku: str
    qty: int


@app.task(queue="typed")
async def charge_typed(i: int, amount: Decimal, when: datetime, line: Line) -> None:
    """Runs with ``amount``, ``when`` and ``line`` decoded to their types; records that it ran."""
    record(i)


@app.task(queue="untyped")
async def charge_untyped(i, amount, when, line) -> None:  # type: ignore[no-untyped-def]
    """The same parameters, unannotated: runs with the JSON values as they arrived."""
    record(i)


# What the figures send after the job index: the typed task gets the rich values, the untyped
# one exactly what jsworker encodes them to (so both bodies are the same bytes and a ratio
# shows only the checking, encoding and decoding).
TYPED_ARGS = (Decimal("1234.50"), datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC), Line("sku-42", 3))
UNTYPED_ARGS = ("1234.50", "2026-01-02T03:04:05.678000Z", {"sku": "sku-42", "qty": 3})
