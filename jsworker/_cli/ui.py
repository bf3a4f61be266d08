"""``jsworker ui``: the web dashboard (:mod:`jsworker.ui`) served by uvicorn."""

from __future__ import annotations

import ipaddress
from typing import Any

import click

from .._observability.logging import configure_logging
from .connection import connection_options, load_connected_app
from .errors import EXIT_USAGE, command_errors, fail


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _nats_token_as_nats_token(command: click.Command) -> click.Command:
    """``--token`` is the dashboard's own: the NATS token of the other commands' ``--token``
    is ``--nats-token`` here (JSWORKER_TOKEN works as everywhere)."""
    for param in command.params:
        if param.name == "token" and isinstance(param, click.Option):
            param.opts = ["--nats-token"]
            param.help = "NATS auth token (prefer JSWORKER_TOKEN)."
    return command


@_nats_token_as_nats_token
@click.command()
@click.argument("app_spec", metavar="MODULE[:ATTR]")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option(
    "--auth",
    envvar="JSWORKER_UI_AUTH",
    default=None,
    metavar="USER:PASSWORD",
    help="Ask for HTTP Basic with these (prefer JSWORKER_UI_AUTH: flags are visible in ps).",
)
@click.option(
    "--token",
    "ui_token",
    envvar="JSWORKER_UI_TOKEN",
    default=None,
    metavar="TOKEN",
    help="Ask for this bearer token, or its cookie, set once by opening /?token=TOKEN "
    "(prefer JSWORKER_UI_TOKEN).",
)
@click.option(
    "--read-only", is_flag=True, help="Show everything, take no action (hidden, and refused with 403)."
)
@click.option("--no-payloads", is_flag=True, help="Never show a job's payload or result.")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
)
@connection_options
def ui(
    app_spec: str,
    host: str,
    port: int,
    auth: str | None,
    ui_token: str | None,
    read_only: bool,
    no_payloads: bool,
    log_level: str,
    **connection: Any,
) -> None:
    """Serve the web dashboard of MODULE's app: queues, jobs, dead letters, schedules and
    workers, live, with the actions an operator takes.

    It connects to NATS as the app's dashboard role (`jsworker permissions`: it reads what an
    operator reads, and may only take the dashboard's actions: pause, resume and purge
    queues, ask the workers to cancel jobs, run retrying jobs now, replay and purge dead
    letters, trigger, pause, resume and remove schedules), so give it the dashboard user's
    credentials (--user/--password, --creds, JSWORKER_* as for every command), and give the
    dashboard itself a password (--auth) or a token (--token) before it listens anywhere
    but 127.0.0.1. Every action it takes is logged as ui.action (who, what, which jobs).
    Needs the ui extra: pip install 'jsworker[ui]'.
    """
    configure_logging(log_level)
    try:
        import uvicorn

        from ..ui import create_app
    except ImportError as exc:
        fail(str(exc), EXIT_USAGE)
    app = load_connected_app(app_spec, connection)
    with command_errors():
        try:
            dashboard = create_app(
                app, auth=auth, token=ui_token, read_only=read_only, payloads=not no_payloads
            )
        except ValueError as exc:
            fail(f"--auth: {exc}", EXIT_USAGE)
    if auth is None and ui_token is None and not _loopback(host):
        click.echo(
            f"warning: serving on {host} with no --auth or --token: anyone who reaches it can take the "
            "dashboard's actions",
            err=True,
        )
    click.echo(f"jsworker dashboard of {app.name} on http://{host}:{port}/", err=True)
    # No access log: a link that carries ?token= would leave the token in it.
    # Open pages keep their event streams open: a stop waits for them only a moment.
    uvicorn.run(
        dashboard,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=3,
    )
