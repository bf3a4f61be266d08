"""A consumer started again from an earlier message (``CONSUMER.RESET``, nats-server 2.14+):
what it had passed is handed out again, and so is what it had handed out and not heard back
of (its pending deliveries are forgotten). Only for consumers whose work may be done twice."""

from __future__ import annotations

from .._errors import StreamRequestError
from .api import api_subject, failures_as, request_json
from .connection import Connection

#: nats-server versions with the consumer reset API.
REWIND_SINCE = (2, 14, 0)


async def rewind(conn: Connection, stream: str, consumer: str, seq: int) -> None:
    """Make ``seq`` the next message ``consumer`` of ``stream`` hands out (its ack floor just
    below it); :class:`StreamRequestError` when the server refuses or does not answer."""
    with failures_as(f"cannot rewind consumer {consumer} of {stream}", StreamRequestError):
        await request_json(conn, api_subject("CONSUMER.RESET", stream, consumer), {"seq": seq})
