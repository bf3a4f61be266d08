"""Requests to the JetStream API, and what a failed one means.

Every request jsworker makes of ``$JS.API`` goes through :func:`request_json` (or, for a
publish, :func:`parse_reply` on the acknowledgement), and every failure, whether the server
refused or never answered, nats-py's exceptions included, is read by :func:`classify`: one
place decides what is a refusal, what is "not found", and what is worth trying again.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import nats.errors
import nats.js.errors

from .._errors import ApiError as ApiError
from .._errors import Failure as Failure
from .._errors import PermissionDeniedError
from .._errors import StreamRequestError as StreamRequestError
from .connection import Connection

API_PREFIX = "$JS.API"
"""Where the JetStream API listens (nats-py's JetStream context uses the same)."""

TIMEOUT = 5.0
"""Seconds one API request waits for its answer."""

NOT_FOUND = 404
UNAVAILABLE = 503
#: "duplicate message id is in process": a write with the same message id is being stored (a
#: clustered stream's leader has proposed it, not yet applied it). Sent again with that id, it
#: is answered as a duplicate once the first is stored: a retry, not a refusal.
IN_PROCESS = 10158


def api_subject(*tokens: str) -> str:
    """The API subject for ``tokens``: ``api_subject("STREAM.INFO", "JSW_SHOP")``."""
    return ".".join((API_PREFIX, *tokens))


#: What :func:`classify` reads: errors of a request, a publish or a nats-py API call.
REQUEST_ERRORS = (ApiError, nats.errors.Error, TimeoutError, OSError)


def classify(exc: BaseException) -> Failure:
    """What ``exc`` (one of :data:`REQUEST_ERRORS`) says about the request that raised it."""
    if isinstance(exc, ApiError):
        return exc.failure
    if isinstance(exc, nats.js.errors.NoStreamResponseError | nats.errors.NoRespondersError):
        return Failure("no responders (JetStream off, or no stream leader yet)", True, UNAVAILABLE)
    if isinstance(exc, nats.js.errors.APIError):
        code = int(exc.code or 0)
        err_code = int(exc.err_code or 0)
        return Failure(str(exc.description or exc), _transient(code, err_code), code, err_code)
    text = str(exc).strip()
    return Failure(f"{type(exc).__name__}: {text}" if text else type(exc).__name__, True)


E = TypeVar("E", bound=Exception)


@contextlib.contextmanager
def failures_as(what: str, error: Callable[..., E]) -> Iterator[None]:
    """Raise ``error("<what>: <why>", transient=...)`` for a failed request inside the block,
    the original chained."""
    try:
        yield
    except REQUEST_ERRORS as exc:
        failure = classify(exc)
        raise error(f"{what}: {failure.text}", transient=failure.transient) from exc


def parse_reply(data: bytes, headers: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The JSON body of an API answer; :class:`ApiError` for an error answer or a 503 status."""
    if headers and headers.get("Status") == str(UNAVAILABLE):
        raise ApiError(Failure("no responders (no stream holds the subject, or no leader)", True, 503))
    try:
        body = json.loads(data)
    except ValueError:
        raise ApiError(Failure(f"an answer that is not JSON: {data[:200]!r}", False)) from None
    if not isinstance(body, dict):
        raise ApiError(Failure(f"an answer that is not a JSON object: {data[:200]!r}", False))
    error = body.get("error")
    if error:
        code = int(error.get("code") or 0)
        text = str(error.get("description") or error)
        err_code = int(error.get("err_code") or 0)
        raise ApiError(Failure(text, _transient(code, err_code), code, err_code))
    return body


def _transient(code: int, err_code: int) -> bool:
    """Whether an error answer may go away if the request is made again: no leader or no
    responder yet (503), or the same message id still being stored (:data:`IN_PROCESS`)."""
    return code == UNAVAILABLE or err_code == IN_PROCESS


async def may_request(conn: Connection, subject: str, *, timeout: float = TIMEOUT) -> bool | None:
    """Whether this connection's user may make the API request ``subject`` (sent with no
    body): True once the server answered (a refusal such as "not found" is an answer), False
    when it refused the publish for permissions, None when no answer came. A refusal here is
    an answer, not logged as an error."""
    conn.nc.denials.probing(subject)
    try:
        await request_json(conn, subject, timeout=timeout)
    except PermissionDeniedError:
        return False
    except ApiError:
        return True
    except (nats.errors.Error, TimeoutError, OSError):
        return None
    return True


async def stream_absent(conn: Connection, name: str) -> bool:
    """True only when the server said stream ``name`` does not exist: False when it exists,
    when this user may not ask (not logged as an error) and when no answer came."""
    subject = api_subject("STREAM.INFO", name)
    conn.nc.denials.probing(subject)
    try:
        await request_json(conn, subject)
    except ApiError as exc:
        return exc.failure.code == NOT_FOUND
    except (PermissionDeniedError, nats.errors.Error, TimeoutError, OSError):
        return False
    return False


async def request_json(
    conn: Connection, subject: str, payload: Mapping[str, Any] | None = None, *, timeout: float = TIMEOUT
) -> dict[str, Any]:
    """One API request with a JSON payload; its answer. Raises one of :data:`REQUEST_ERRORS`."""
    data = json.dumps(payload).encode() if payload is not None else b""
    msg = await conn.nc.request(subject, data, timeout=timeout)
    return parse_reply(msg.data, msg.headers)
