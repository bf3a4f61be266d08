"""Exit codes, the one-line failure every command prints, and which error gets which code."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import NoReturn

import click

from .._deadletters import DeadLetterNotFound, DeadLetterNotReplayable
from .._errors import (
    ConfigurationError,
    ConnectError,
    EnqueueError,
    JsworkerError,
    PermissionDeniedError,
    ServerVersionError,
    TopologyError,
)
from .._observability.logging import get_logger
from ..events._reader import EventsNotFound
from ..jetstream.api import StreamRequestError
from ..jetstream.connection import redact_urls
from .loader import AppNotFound

EXIT_CRASH = 1
EXIT_USAGE = 2
EXIT_CONNECT = 3

log = get_logger("jsworker.cli")

# What the user asked for is wrong: a bad name or option, something that does not exist, an
# extra that is not installed, a stream the server holds with another configuration.
_USAGE = (
    ConfigurationError,
    AppNotFound,
    DeadLetterNotFound,
    DeadLetterNotReplayable,
    EventsNotFound,
    ServerVersionError,
    ImportError,
)


def exit_code(exc: BaseException) -> int:
    """The exit code of a command that stops with ``exc``.

    3 when the servers cannot be reached, did not answer (trying again may work: an enqueue
    that did not, under the same job id) or refused
    a permission the command needs, 2 for a usage error or a topology the server refuses, 1
    for anything else.
    """
    if isinstance(exc, ConnectError | PermissionDeniedError | EnqueueError):
        return EXIT_CONNECT
    if isinstance(exc, TopologyError | StreamRequestError):
        if exc.transient:
            return EXIT_CONNECT
        return EXIT_USAGE if isinstance(exc, TopologyError) else EXIT_CRASH
    if isinstance(exc, _USAGE):
        return EXIT_USAGE
    return EXIT_CRASH


def fail(message: str, code: int) -> NoReturn:
    """Print ``error: message`` on stderr (credentials in URLs removed) and exit with ``code``."""
    click.echo(f"error: {redact_urls(message)}", err=True)
    raise SystemExit(code)


@contextlib.contextmanager
def command_errors(crashed: str = "crashed") -> Iterator[None]:
    """Turn an error escaping the block into one ``error:`` line and :func:`exit_code`.

    Errors jsworker raises print their own message; anything else is unexpected, so its type
    is printed too (after ``crashed``) and its traceback logged.
    """
    try:
        yield
    except (click.ClickException, click.Abort, click.exceptions.Exit):
        raise  # click's own: it prints them and picks the code
    except (JsworkerError, ImportError) as exc:
        fail(str(exc), exit_code(exc))
    except Exception as exc:
        log.exception("command.crashed")
        fail(f"{crashed}: {type(exc).__name__}: {exc}", EXIT_CRASH)
