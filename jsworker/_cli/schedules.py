"""``jsworker schedules``: an app's periodic schedules on the server, through :class:`~jsworker.admin.Admin`.

Exit codes as for every command: 0 ok, 1 crashed, 2 usage error (an unknown schedule, a server
too old for schedules), 3 cannot connect.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from .._observability.logging import configure_logging, printable
from .._scheduling.cron import as_written
from .._scheduling.periodic import ScheduleState
from ..admin import Admin
from .connection import connection_options, load_connected_app
from .errors import EXIT_USAGE, command_errors, fail

T = TypeVar("T")

_APP = click.argument("app_spec", metavar="MODULE[:ATTR]")
_NAME = click.argument("name")


def _run(app_spec: str, connection: dict[str, Any], work: Callable[[Admin], Awaitable[T]]) -> T:
    """Load the app, run ``work`` with its Admin, and turn failures into one line and a code."""
    configure_logging("warning")
    app = load_connected_app(app_spec, connection)

    async def main() -> T:
        async with Admin(app, purpose="schedules") as admin:
            return await work(admin)

    with command_errors():
        return asyncio.run(main())


@click.group()
def schedules() -> None:
    """List, install, trigger, pause, resume and remove periodic schedules."""


@schedules.command("list")
@_APP
@click.option("--json", "as_json", is_flag=True, help="JSON instead of text (one object a line).")
@connection_options
def list_(app_spec: str, as_json: bool, **connection: str | None) -> None:
    """The app's schedules on the server.

    Columns: name, task, expression (a cron as written: five fields, six when it fires at a
    second other than 0; or @every), time zone, next run (UTC), paused; "stale" marks one
    the loaded code does not declare, "malformed" one whose expression or zone cannot be
    read (not written by jsworker). --json gives the expression as the server fires it.
    """
    found = _run(app_spec, connection, lambda admin: admin.schedules())
    if as_json:
        for state in found:
            click.echo(json.dumps(schedule_json(state)))
        return
    if not found:
        click.echo("no schedules")
        return
    rows = [("NAME", "TASK", "EXPRESSION", "ZONE", "NEXT RUN", "PAUSED")]
    for state in found:
        following = state.next_run()
        rows.append(
            (
                printable(state.name, 64)
                + ("" if state.declared else " (stale)")
                + ("" if state.malformed is None else " (malformed)"),
                printable(state.task, 64),
                printable(as_written(state.expression), 64),
                printable(state.tz or "UTC", 64),
                following.strftime("%Y-%m-%dT%H:%M:%SZ") if following else "-",
                "yes" if state.paused else "no",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def schedule_json(state: ScheduleState) -> dict[str, Any]:
    """One schedule, JSON-ready."""
    following = state.next_run()
    return {
        "name": state.name,
        "task": state.task,
        "queue": state.queue,
        "expression": state.expression,
        "tz": state.tz,
        "paused": state.paused,
        "declared": state.declared,
        "next_run": following.isoformat() if following else None,
        "malformed": state.malformed,
    }


@schedules.command()
@_APP
@click.option("--prune", is_flag=True, help="Also remove schedules the code no longer declares.")
@connection_options
def sync(app_spec: str, prune: bool, **connection: str | None) -> None:
    """Install the app's declared schedules, as every worker does at start."""
    report = _run(app_spec, connection, lambda admin: admin.sync_schedules(prune=prune))
    for what in ("created", "updated", "unchanged", "removed"):
        names = getattr(report, what)
        if names:
            click.echo(f"{what}: {', '.join(names)}")
    left = [n for n in report.stale if n not in report.removed]
    if left:
        click.echo(f"stale (not declared; remove with --prune): {', '.join(left)}")


@schedules.command("mark-unique")
@_APP
@click.option("--dry-run", is_flag=True, help="Only count the unique delayed jobs without a marker.")
@connection_options
def mark_unique(app_spec: str, dry_run: bool, **connection: str | None) -> None:
    """Mark the unique delayed jobs an earlier version scheduled, once: after the workers and
    before the producers are upgraded (see docs/lifecycle.md, "Unique jobs")."""
    count = _run(app_spec, connection, lambda admin: admin.mark_unique_schedules(dry_run=dry_run))
    click.echo(f"{count} unique delayed job(s) {'lack' if dry_run else 'given'} a marker")


@schedules.command()
@_APP
@_NAME
@connection_options
def trigger(app_spec: str, name: str, **connection: str | None) -> None:
    """Enqueue one job of schedule NAME now (its cadence is unchanged); prints the job id."""
    job = _run(app_spec, connection, lambda admin: admin.trigger_schedule(name))
    click.echo(job.id)


def _toggle(verb: str, done: str, already: str) -> click.Command:
    @schedules.command(verb)
    @_APP
    @_NAME
    @connection_options
    def command(app_spec: str, name: str, **connection: str | None) -> None:
        changed = _run(app_spec, connection, lambda admin: getattr(admin, f"{verb}_schedule")(name))
        click.echo(f"{name}: {done if changed else already}")

    command.__doc__ = f"{verb.capitalize()} schedule NAME."
    return command


pause = _toggle("pause", "paused", "was already paused")
resume = _toggle("resume", "resumed", "was not paused")


@schedules.command()
@_APP
@_NAME
@connection_options
def remove(app_spec: str, name: str, **connection: str | None) -> None:
    """Remove schedule NAME from the server (a worker whose code declares it installs it again)."""
    if not _run(app_spec, connection, lambda admin: admin.remove_schedule(name)):
        fail(f"no schedule named {name!r} on the server", EXIT_USAGE)
    click.echo(f"{name}: removed")
