"""The app of the Spark round-trip and sink figures (``bench/spark_roundtrip.py``): a no-op task
that keeps its result, and one that records how long after its row arrived it started."""

from __future__ import annotations

from datetime import datetime

from lib.records import record

from jsworker import App

app = App("benchmap", spark_sinks=True)


@app.task(store_result=True)
async def noop(order_id: int) -> int:
    """Returns its argument: the result comes back to the DataFrame."""
    return order_id


@app.task(queue="stamped")
async def stamp(value: int, timestamp: str) -> None:
    """Records its start next to when its row arrived (the rate source's ``timestamp``)."""
    arrived = datetime.fromisoformat(timestamp)
    record(value, int(arrived.timestamp() * 1e9))
