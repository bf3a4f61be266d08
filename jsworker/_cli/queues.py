"""``jsworker queues``: pause and resume a queue (the server's consumer pause), and change
its limits at run time, through :class:`~jsworker.admin.Admin`.

Exit codes as for every command: 0 ok, 1 crashed, 2 usage error (a queue the app does not
declare, a server before 2.11), 3 cannot connect. A declared queue that no worker has served
yet is made (as its first worker would make it) and paused.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import click

from .._observability.logging import configure_logging, printable
from ..admin import Admin
from .connection import connection_options, load_connected_app
from .errors import command_errors

_APP = click.argument("app_spec", metavar="MODULE[:ATTR]")
_QUEUE = click.argument("queue")


@click.group()
def queues() -> None:
    """Pause and resume queues (nats-server 2.11+), change their limits. Runs as the operator."""


@queues.command()
@_APP
@_QUEUE
@click.option(
    "--for",
    "seconds",
    type=click.FloatRange(min=1),
    default=None,
    metavar="SECONDS",
    help="Resume by itself after this long (default: paused until resumed).",
)
@connection_options
def pause(app_spec: str, queue: str, seconds: float | None, **connection: str | None) -> None:
    """Stop workers taking QUEUE's jobs: its consumer on the server hands out nothing until
    resumed (jobs running finish; new ones wait). Kept by the server: restarting workers does
    not end it."""
    configure_logging("warning")
    app = load_connected_app(app_spec, connection)
    until = datetime.now(UTC) + timedelta(seconds=seconds) if seconds is not None else None

    async def main() -> None:
        async with Admin(app, purpose="queues") as admin:
            await admin.pause_queue(queue, until)

    with command_errors():
        asyncio.run(main())
    end = f" until {until.strftime('%Y-%m-%dT%H:%M:%SZ')}" if until is not None else ""
    click.echo(f"paused {printable(queue, 64)}{end}")


@queues.command()
@_APP
@_QUEUE
@connection_options
def resume(app_spec: str, queue: str, **connection: str | None) -> None:
    """Let workers take QUEUE's jobs again."""
    configure_logging("warning")
    app = load_connected_app(app_spec, connection)

    async def main() -> bool:
        async with Admin(app, purpose="queues") as admin:
            return await admin.resume_queue(queue)

    with command_errors():
        was_paused = asyncio.run(main())
    click.echo(f"resumed {printable(queue, 64)}" if was_paused else f"{printable(queue, 64)} was not paused")


@queues.command()
@_APP
@_QUEUE
@click.option(
    "--max-running",
    default=None,
    metavar="N|declared",
    help="Jobs of QUEUE running at once across every worker (0: none of its own), or 'declared'.",
)
@click.option(
    "--rate-limit",
    default=None,
    metavar="N/s|N/m|N/h|none|declared",
    help="Starts of QUEUE's jobs per second, minute or hour across every worker, 'none', or 'declared'.",
)
@connection_options
def limits(
    app_spec: str, queue: str, max_running: str | None, rate_limit: str | None, **connection: str | None
) -> None:
    """Change QUEUE's limits without a deploy, asking a running worker to; deploys keep them
    until set back to 'declared' (the code's). Prints the limits set at run time."""
    configure_logging("warning")
    app = load_connected_app(app_spec, connection)
    running: int | str | None = max_running
    if max_running is not None and max_running.isdigit():
        running = int(max_running)

    async def main() -> dict[str, str]:
        async with Admin(app, purpose="queues") as admin:
            return await admin.set_queue_limits(queue, max_running=running, rate_limit=rate_limit)

    with command_errors():
        kept = asyncio.run(main())
    said = ", ".join(f"{name} {value}" for name, value in sorted(kept.items()))
    click.echo(f"{printable(queue, 64)}: " + (f"set at run time: {said}" if kept else "the code's limits"))
