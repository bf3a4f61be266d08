"""Turning the NATS client's errors into jsworker's, saying whether trying again can help."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import nats.errors
import nats.js.errors

from ..errors import JsworkerError


class StreamRequestError(JsworkerError):
    """A request to the JetStream API failed.

    ``transient`` is True when the server did not answer (trying again may work), False when
    it refused the request.
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@contextlib.contextmanager
def client_errors(what: str, error: type[StreamRequestError]) -> Iterator[None]:
    """Raise ``error("<what>: <why>")`` for any client error inside the block, the client's
    error chained; a 503 (no JetStream leader yet) and no answer at all are transient."""
    try:
        yield
    except nats.js.errors.APIError as exc:
        transient = isinstance(exc, nats.js.errors.ServiceUnavailableError)
        raise error(f"{what}: {exc.description or exc}", transient=transient) from exc
    except (nats.errors.Error, TimeoutError) as exc:
        text = str(exc).strip() or type(exc).__name__
        raise error(f"{what}: {text}", transient=True) from exc
