"""A task that logs an exception while its arguments (a card number) are local variables."""

from __future__ import annotations

import structlog

from jsworker import App, Reject
from jsworker.testing import record_execution as record

app = App("secret")
log = structlog.get_logger("shop")


@app.task(max_retries=0)
def charge(card_number: str, cents: int) -> None:
    masked = card_number[-4:]
    try:
        raise ValueError(f"card ending {masked} declined")
    except ValueError:
        log.exception("charge.failed")
    record("done")
    raise Reject("declined")


@app.task(max_retries=0)
def shout(text: str) -> None:
    log.warning("shout", text=text)
    record("done")
