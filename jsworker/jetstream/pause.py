"""Pausing and resuming a consumer: the server's own pause (``CONSUMER.PAUSE``, nats-server
2.11+).

A paused consumer hands out nothing until its pause ends: pull requests wait on the server as
they would on an empty queue, jobs already handed out run to the end and are acknowledged as
usual. The pause is the consumer's, kept on the server (a restarted worker, which creates its
consumers again, does not end it) and ends by itself at ``pause_until``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from .._errors import StreamRequestError
from .api import ApiError, api_subject, failures_as, request_json
from .connection import Connection

#: The servers that know ``CONSUMER.PAUSE``.
PAUSE_SINCE = (2, 11, 0)
# The server answers an unpaused consumer's pause_until as Go's zero time.
_ZERO_TIME = "0001-01-01T00:00:00Z"


@dataclass(frozen=True, slots=True)
class PauseState:
    """Whether a consumer is paused now, and until when (UTC; None when it is not)."""

    paused: bool
    until: datetime | None = None


async def pause_consumer(
    conn: Connection, stream: str, consumer: str, until: datetime | None
) -> PauseState | None:
    """Pause ``consumer`` of ``stream`` until ``until`` (an aware datetime), or resume it when
    ``until`` is None; the state the server answers with.

    None when there is no such consumer (or stream),
    :class:`~jsworker.ServerVersionError` before nats-server 2.11, a
    :class:`~jsworker._errors.StreamRequestError` when the request fails.
    """
    conn.require_version("pausing a queue", PAUSE_SINCE)
    request: dict[str, str] = {}
    if until is not None:
        if until.tzinfo is None:
            raise ValueError("pause_until must be an aware datetime")
        request["pause_until"] = until.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    with failures_as(f"cannot pause or resume {consumer} of {stream}", StreamRequestError):
        try:
            answer = await request_json(conn, api_subject("CONSUMER.PAUSE", stream, consumer), request)
        except ApiError as exc:
            if exc.failure.not_found:
                return None
            raise
    return _state(answer)


def _state(answer: dict[str, object]) -> PauseState:
    paused = bool(answer.get("paused"))
    stamp = answer.get("pause_until")
    if not paused or not isinstance(stamp, str) or stamp == _ZERO_TIME:
        return PauseState(paused)
    try:
        return PauseState(True, datetime.fromisoformat(stamp).astimezone(UTC))
    except ValueError:
        return PauseState(True)
