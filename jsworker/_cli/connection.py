"""Connection flags shared by the commands that talk to NATS."""

from __future__ import annotations

from typing import Any

from .._app import App
from ..jetstream.connection import ConnectOptions, parse_servers
from .errors import command_errors
from .loader import load_app
from .options import flag_fields, options_from

CONNECTION_FLAGS = flag_fields(ConnectOptions)

#: Adds a flag for every :class:`ConnectOptions` option that has one (``--url``, the
#: credentials, TLS). Left out, a flag changes nothing: the app's own settings stand.
connection_options = options_from(ConnectOptions, defaults=False)


def apply_connection_options(app: App, options: dict[str, Any]) -> None:
    """Point ``app`` at what the flags in ``options`` say (flags left out change nothing)."""
    given = {f.name: options.pop(f.name, None) for f in CONNECTION_FLAGS}
    servers = parse_servers(given.pop("servers")) or None
    app.configure_connection(servers, **given)


def load_connected_app(app_spec: str, options: dict[str, Any]) -> App:
    """The App of ``app_spec`` pointed where the flags say; exits with the usage code (2) and
    one line when it cannot be loaded or the flags are wrong."""
    with command_errors():
        app = load_app(app_spec)
        apply_connection_options(app, options)
    return app
