"""``jsworker workers``: the live worker processes of an app, from the worker registry.

Exit codes as for every command: 0 ok (also when no worker is alive), 1 crashed, 2 usage
error (a server too old for the registry), 3 cannot connect.
"""

from __future__ import annotations

import asyncio
import json
import time

import click

from .._app import App
from .._core.queues import format_age
from .._observability.logging import configure_logging, printable
from .._registry.entries import ENTRY_TTL, WorkerEntry
from ..admin import Admin
from .connection import connection_options, load_connected_app
from .errors import command_errors

_COLUMNS = ("ID", "HOST", "PID", "VERSION", "QUEUES", "CONCURRENCY", "RUNNING", "DONE", "UP", "SEEN")
# Names are read left to right, numbers and ages line up on the right.
_LEFT = frozenset({"ID", "HOST", "VERSION", "QUEUES"})


@click.command()
@click.argument("app_spec", metavar="MODULE[:ATTR]")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per worker (JSON Lines).")
@connection_options
def workers(app_spec: str, as_json: bool, **connection: str | None) -> None:
    """List the live worker processes of the App in MODULE (or MODULE:ATTR), from the worker
    registry: each worker rewrites its entry every 4 s, one that stops cleanly removes it, and
    the entry of one killed or cut off is gone 12 s after its last write.

    \b
    ID           unique per process start: <host>-<pid>-<random>
    HOST, PID    where it runs
    VERSION      its jsworker release
    QUEUES       the queues it pulls from
    CONCURRENCY  the most jobs it runs at once
    RUNNING      jobs it was running at its last write
    DONE         jobs it settled since it started, whatever their outcome
    UP           time since it started
    SEEN         time since its last write
    """
    configure_logging("warning")
    app = load_connected_app(app_spec, connection)
    with command_errors("workers failed"):
        entries = asyncio.run(_live(app))
    if as_json:
        for entry in entries:
            click.echo(json.dumps({"app": app.name, **entry.as_dict()}))
        return
    _table(app.name, entries)


async def _live(app: App) -> list[WorkerEntry]:
    async with Admin(app, purpose="workers") as admin:
        return await admin.workers()


def _table(app: str, entries: list[WorkerEntry]) -> None:
    now = time.time()
    rows = [
        (
            printable(e.id),
            printable(e.host),
            str(e.pid),
            printable(e.version),
            printable(",".join(e.queues)),
            str(e.concurrency),
            str(e.running),
            str(e.done),
            # Worker clocks, read on this machine: skew must not show a negative time.
            format_age(max(0.0, now - e.started_at)),
            f"{format_age(max(0.0, now - e.seen_at))} ago",
        )
        for e in entries
    ]
    widths = [max(len(r[i]) for r in [_COLUMNS, *rows]) for i in range(len(_COLUMNS))]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.ljust(w) if name in _LEFT else c.rjust(w)
            for name, c, w in zip(_COLUMNS, cells, widths, strict=True)
        ).rstrip()

    click.echo(f"app {app}  {len(entries)} live worker(s)  {time.strftime('%Y-%m-%d %H:%M:%S')}")
    click.echo(line(_COLUMNS))
    for row in rows:
        click.echo(line(row))
    if not rows:
        click.echo(f"(no live workers: none is running, or none has written its entry for {ENTRY_TTL:g} s)")
