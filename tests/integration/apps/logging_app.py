"""A task that logs through structlog, for checking that its lines carry the job's context."""

import structlog

from jsworker import App

app = App("logs")
log = structlog.get_logger("logging_app")


@app.task
async def greet(name: str) -> None:
    """Logs one line of its own."""
    log.info("greeted", who=name)
