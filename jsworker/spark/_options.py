"""Options shared by jsworker's Spark data sources: where to connect, and as whom."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._app import App
from .._config import option_fields
from .._errors import ConfigurationError
from ..jetstream.connection import ConnectOptions, parse_servers

# Options naming credentials and the inbox prefix, as the command-line flags do ("creds",
# "nkey_seed", "inbox_prefix"), and the ConnectOptions field each sets.
CREDENTIAL_OPTIONS = {
    f.metadata["flag"].removeprefix("--").replace("-", "_"): f.name
    for f in option_fields(ConnectOptions)
    if f.metadata.get("flag") and f.name != "servers"
}


@dataclass(frozen=True, slots=True)
class Connect:
    """``servers`` (comma separated, else ``JSWORKER_URL``) and the credential options."""

    servers: tuple[str, ...] = ()
    credentials: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> Connect:
        """The connection options among a data source's options."""

        def given(option: str) -> str | None:
            # "credentials", the App argument's own name, is accepted for "creds" too.
            return options.get(option) or (options.get("credentials") if option == "creds" else None)

        return cls(
            servers=tuple(parse_servers(options.get("servers"))),
            credentials=tuple(
                (argument, value)
                for option, argument in CREDENTIAL_OPTIONS.items()
                if (value := given(option))
            ),
        )

    @staticmethod
    def options_of(connect: ConnectOptions) -> dict[str, str]:
        """The data-source options that connect as ``connect`` does."""
        options = {"servers": ",".join(connect.servers)}
        options.update(
            (option, value)
            for option, argument in CREDENTIAL_OPTIONS.items()
            if (value := getattr(connect, argument)) is not None
        )
        return options

    def app(self, name: str, **settings: Any) -> App:
        """An App to connect with; credentials not given fall back to ``JSWORKER_*`` as usual."""
        app = App(name, list(self.servers) or None, **settings)
        app.configure_connection(None, **dict(self.credentials))
        return app


def names(raw: str) -> tuple[str, ...]:
    """The non-empty items of a comma-separated option."""
    return tuple(name.strip() for name in raw.split(",") if name.strip())


def integer(option: str, raw: str, minimum: int) -> int:
    """``raw`` as a whole number >= ``minimum``, else a ConfigurationError naming the option."""
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ConfigurationError(f"option {option!r} must be an integer >= {minimum}, not {raw!r}")
    return value
