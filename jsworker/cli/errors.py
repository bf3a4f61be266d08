"""Exit codes and the one-line failure the command prints."""

from __future__ import annotations

from typing import NoReturn

import click

EXIT_CRASH = 1
EXIT_USAGE = 2
EXIT_CONNECT = 3


def fail(message: str, code: int) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code``."""
    click.echo(f"error: {message}", err=True)
    raise SystemExit(code)
