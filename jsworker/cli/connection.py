"""Connection flags shared by the commands that talk to NATS."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..app import App
from ..errors import ConfigurationError
from .errors import EXIT_USAGE, fail
from .loader import AppNotFound, load_app

F = TypeVar("F", bound=Callable[..., Any])

# (flag, keyword of App.configure_connection, help). Secrets given as flags show up in process
# listings; the help says to prefer the JSWORKER_* variables the App reads by itself.
_FLAGS = (
    ("--user", "user", "User name."),
    ("--password", "password", "Password (prefer JSWORKER_PASSWORD: flags are visible in ps)."),
    ("--token", "token", "Auth token (prefer JSWORKER_TOKEN)."),
    ("--creds", "credentials", "A .creds file (JWT + NKey seed)."),
    ("--nkey-seed", "nkey_seed", "An NKey seed file."),
    ("--tls-ca", "tls_ca", "CA bundle to verify the servers with."),
    ("--tls-cert", "tls_cert", "Client certificate (mutual TLS)."),
    ("--tls-key", "tls_key", "Client certificate key (mutual TLS)."),
)


def connection_options(command: F) -> F:
    """Add ``--url`` and the credential flags to a command; they arrive as keyword arguments."""
    for flag, name, help_text in reversed(_FLAGS):
        command = click.option(flag, name, default=None, help=help_text)(command)
    return click.option(
        "--url",
        "url",
        default=None,
        help="NATS server URL(s), comma separated [default: the app's, else JSWORKER_URL].",
    )(command)


def apply_connection_options(app: App, options: dict[str, Any]) -> None:
    """Point ``app`` at what the flags in ``options`` say (flags left out change nothing)."""
    url = options.pop("url", None)
    servers = [u.strip() for u in url.split(",") if u.strip()] if url else None
    app.configure_connection(servers, **{name: options.pop(name, None) for _, name, _ in _FLAGS})


def load_connected_app(app_spec: str, options: dict[str, Any]) -> App:
    """The App of ``app_spec`` pointed where the flags say; exits with the usage code (2) and
    one line when it cannot be loaded or the flags are wrong."""
    try:
        app = load_app(app_spec)
        apply_connection_options(app, options)
    except (AppNotFound, ConfigurationError) as exc:
        fail(str(exc), EXIT_USAGE)
    return app
