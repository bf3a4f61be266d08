"""``jsworker provision``: the provisioning step that creates and updates an app's streams and
queue consumers (:mod:`jsworker._core.provisioning`), run before the workers.

Exit codes as for every command: 0 done (whether or not anything changed), 2 usage error (a
stream of that name the server holds for something else), 3 cannot connect, or the user may
not create or update the streams.
"""

from __future__ import annotations

import asyncio
from typing import Any

import click

from .._app import App
from .._core.options import AppOptions
from .._core.provisioning import Provisioned, provision_app
from .._observability.logging import configure_logging
from ..jetstream.connection import Connection
from .connection import connection_options, load_connected_app
from .errors import command_errors
from .options import flag_fields, options_from


@click.command()
@click.argument("app_spec", metavar="MODULE[:ATTR]")
@options_from(AppOptions, defaults=False)
@connection_options
def provision(app_spec: str, **options: Any) -> None:
    """Create or update every stream the App in MODULE needs and its queues' consumers.

    Prints a line for each: created, updated or as is; a second run prints "as is" only. Run it
    before the workers, as the app's provisioner user (``<app>-provisioner`` of ``jsworker
    permissions``) and with the stream flags or JSWORKER_* variables the workers are given
    (--replicas, JSWORKER_DLQ_MAX_AGE, ...): on a server with the printed permissions no other user
    may create or change a stream, and a worker that finds one missing or out of date stops.
    """
    configure_logging("warning")
    app = load_connected_app(app_spec, options)
    with command_errors():
        app.configure_options(**{f.name: options.pop(f.name) for f in flag_fields(AppOptions)})
        done = asyncio.run(_provision(app))
    for item in done:
        click.echo(str(item))
        if item.replicas is not None:
            click.echo(f"  note: {item.replicas}")


async def _provision(app: App) -> list[Provisioned]:
    conn = await Connection.open(app.connect_options("provisioner"))
    try:
        return await provision_app(app, conn)
    finally:
        await conn.close()
