"""The app of ``bench/capacity.py``: one no-op task whose app name, partitions and replicas
come from the environment, so that one module serves every configuration measured."""

from __future__ import annotations

import os

from lib.records import record

from jsworker import App

app = App(
    os.environ.get("CAP_APP", "cap"),
    partitions=int(os.environ.get("CAP_PARTITIONS", "1")),
    replicas=int(os.environ.get("CAP_REPLICAS", "1")),
)


@app.task
async def noop(i: int) -> None:
    """Records that it ran."""
    record(i)
