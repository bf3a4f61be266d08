"""What an error means to someone looking at the dashboard: a status and one clear sentence.

No page ever shows a traceback: errors jsworker raises say what went wrong in their message;
anything else is logged with its traceback and shown as "unexpected".
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus

from starlette.exceptions import HTTPException

from .._errors import (
    ConfigurationError,
    ConnectError,
    DeadLetterNotFound,
    DeadLetterNotReplayable,
    EnqueueError,
    JobNotFound,
    JsworkerError,
    NoWorkerRunning,
    PermissionDeniedError,
    ServerVersionError,
    StreamRequestError,
    TopologyError,
)
from ..jetstream.connection import redact_urls


@dataclass(frozen=True, slots=True)
class Problem:
    """An error as a page shows it."""

    status: int
    title: str
    message: str


def refuse(status: int, message: str) -> HTTPException:
    """The error a page raises for a request it cannot serve (``raise refuse(404, "...")``)."""
    return HTTPException(status, message)


# Errors whose own message says it all, in the order they are looked for: status and title.
_PLAIN: tuple[tuple[type[Exception] | tuple[type[Exception], ...], int, str], ...] = (
    ((JobNotFound, DeadLetterNotFound), 404, "Not found"),
    (DeadLetterNotReplayable, 409, "Cannot replay"),
    (ServerVersionError, 501, "Server too old"),
    (ConfigurationError, 400, "Bad request"),
    (NoWorkerRunning, 503, "No worker running"),
)


def describe(exc: BaseException) -> Problem:
    """The :class:`Problem` ``exc`` is to the person at the page."""
    text = redact_urls(str(exc)) or type(exc).__name__
    if isinstance(exc, HTTPException):
        return Problem(exc.status_code, HTTPStatus(exc.status_code).phrase, str(exc.detail))
    for kinds, status, title in _PLAIN:
        if isinstance(exc, kinds):
            return Problem(status, title, text)
    if isinstance(exc, PermissionDeniedError):
        return Problem(403, "Not allowed by NATS", f"the dashboard's NATS user may not do this: {text}")
    if isinstance(exc, ConnectError):
        return Problem(503, "NATS unreachable", f"cannot reach the NATS server: {text}")
    if isinstance(exc, TimeoutError):
        return Problem(504, "No answer", "the NATS server did not answer in time; try again")
    if isinstance(exc, StreamRequestError | TopologyError | EnqueueError):
        if getattr(exc, "transient", True):
            return Problem(503, "NATS unavailable", f"the NATS server did not answer: {text}")
        return Problem(502, "NATS refused", f"the NATS server refused: {text}")
    if isinstance(exc, JsworkerError):
        return Problem(500, "Failed", text)
    return Problem(
        500, "Unexpected error", "something unexpected went wrong; the dashboard's log has the details"
    )
