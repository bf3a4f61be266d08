"""App ``perm`` with Spark streaming sinks (its sinks stream provisioned), for users that hold
only the permissions ``jsworker permissions perm`` prints."""

from __future__ import annotations

from jsworker import App

# The streams of apps/perm_app.py (events on), and the sinks stream.
app = App("perm", events=True, spark_sinks=True)


@app.task
async def charge(order_id: int) -> None:
    """Never run here: the sink only enqueues it."""
