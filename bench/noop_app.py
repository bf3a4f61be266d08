"""No-op tasks for the throughput benchmark."""

from jsworker import App

app = App("bench")


@app.task
async def noop_async(i: int) -> None:
    """Does nothing: measures the framework, not the work."""


@app.task(queue="sync")
def noop_sync(i: int) -> None:
    """Does nothing, in the thread pool."""
