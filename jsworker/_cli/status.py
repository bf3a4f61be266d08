"""``jsworker status``: what every queue of an app holds right now, once or every N seconds."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click

from .._app import App
from .._core.queues import QueueStatus, format_age
from .._errors import ConnectError, StreamRequestError, TopologyError
from ..admin import Admin
from .connection import connection_options, load_connected_app
from .errors import command_errors

T = TypeVar("T")

_COLUMNS = (
    "QUEUE",
    "PENDING",
    "IN FLIGHT",
    "REDELIVERED",
    "DEAD",
    "WAITING",
    "OLDEST",
    "DELAYED",
    "NEXT DUE",
    "MAX RUNNING",
    "PRIORITY",
    "WORKERS",
)
_CLEAR = "\x1b[H\x1b[2J"
# Seconds a single look waits for an answer while the server has none (no stream leader yet).
_ELECTION = 15.0


class _Stopped(Exception):
    """Ctrl-C or SIGTERM arrived: the command ends, successfully."""


@click.command()
@click.argument("app_spec", metavar="MODULE[:ATTR]")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per queue per refresh (JSON Lines).")
@click.option(
    "--watch",
    type=click.FloatRange(min=0.1),
    default=None,
    metavar="SECONDS",
    help="Refresh every SECONDS until Ctrl-C.",
)
@connection_options
def status(app_spec: str, as_json: bool, watch: float | None, **connection: str | None) -> None:
    """Show every queue of the App in MODULE (or MODULE:ATTR): jobs pending, in flight,
    redelivered, dead letters, waiting pull requests, the age of the oldest pending job, the
    delayed jobs waiting for their due time, and the live workers.

    \b
    PENDING      stored, not yet handed to a worker
    IN FLIGHT    handed to a worker, not acked yet (retries waiting out a backoff included)
    REDELIVERED  of those, delivered more than once
    DEAD         dead letters kept for the queue
    WAITING      pull requests open on the server: > 0 means a live worker has room
    OLDEST       age of the oldest pending job (server clock)
    DELAYED      delayed jobs waiting on the server for their due time
    NEXT DUE     when the next of those is due
    MAX RUNNING  most jobs of the queue running at once across all workers (server-enforced)
    PRIORITY     the queue's priority among those one worker serves
    WORKERS      live worker processes pulling from the queue (jsworker workers lists them)
    """
    app = load_connected_app(app_spec, connection)
    # In a terminal --watch redraws the table in place instead of scrolling.
    redraw = watch is not None and sys.stdout.isatty()
    emit = _json_lines if as_json else functools.partial(_table, clear=redraw)
    with contextlib.suppress(KeyboardInterrupt), command_errors("status failed"):
        # KeyboardInterrupt: Ctrl-C before the signal handlers were in place, a clean stop.
        asyncio.run(_show(app, emit, watch))


async def _show(app: App, emit: Callable[[App, list[QueueStatus]], None], every: float | None) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with Admin(app, purpose="status") as admin:
        try:
            # Connected before the first refresh: a server that cannot be reached at all is
            # an error even with --watch, which only rides out trouble once it has worked.
            await _unless_stopped(stop, admin.connection())
            # A single look rides out a stream electing its leader (a few seconds), as
            # watching rides out any trouble.
            patience, said = time.monotonic() + _ELECTION, False
            while True:
                try:
                    queues = await _unless_stopped(stop, admin.queues())
                except (ConnectError, TopologyError, StreamRequestError) as exc:
                    # The servers answer, but not yet for this (a stream electing its leader).
                    electing = not isinstance(exc, ConnectError) and exc.transient
                    if every is None:
                        if not electing or time.monotonic() >= patience:
                            raise
                        if not said:
                            said = True
                            click.echo(f"waiting up to {_ELECTION:g}s: {exc}", err=True)
                        await asyncio.sleep(0.5)
                        continue
                    # Watching is for riding through trouble: say what failed and try again.
                    if not (electing or isinstance(exc, ConnectError)):
                        raise
                    click.echo(f"warning: {exc}", err=True)
                else:
                    emit(app, queues)
                if every is None:
                    return
                try:
                    await asyncio.wait_for(stop.wait(), every)
                    return
                except TimeoutError:
                    pass
        except _Stopped:
            return


async def _unless_stopped(stop: asyncio.Event, work: Awaitable[T]) -> T:
    """``await work``, unless ``stop`` is set first: then cancel it and raise _Stopped."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise _Stopped
    return task.result()


def _json_lines(app: App, queues: list[QueueStatus]) -> None:
    at = round(time.time(), 3)
    for queue in queues:
        row = queue.as_dict()
        for key in ("oldest_pending_age", "next_due_in"):
            if row[key] is not None:
                row[key] = round(row[key], 3)
        click.echo(json.dumps({"app": app.name, "time": at, **row}))
    sys.stdout.flush()


def _table(app: App, queues: list[QueueStatus], *, clear: bool = False) -> None:
    rows = [
        (
            q.queue,
            str(q.pending),
            str(q.in_flight),
            str(q.redelivered),
            str(q.dead_letters),
            str(q.waiting_pulls),
            format_age(q.oldest_pending_age),
            str(q.delayed),
            "-"
            if q.next_due_in is None
            else ("now" if q.next_due_in <= 0 else f"in {format_age(q.next_due_in)}"),
            "-" if q.max_running is None else str(q.max_running),
            str(q.priority),
            "-" if q.workers is None else str(q.workers),
        )
        for q in queues
    ]
    widths = [max(len(r[i]) for r in [_COLUMNS, *rows]) for i in range(len(_COLUMNS))]

    def line(cells: tuple[str, ...]) -> str:
        # Queue names left-aligned, numbers right-aligned so their digits line up.
        first = cells[0].ljust(widths[0])
        return "  ".join([first, *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))])

    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    if clear:
        click.echo(_CLEAR, nl=False)
    click.echo(f"app {app.name}  stream {app.namespace.stream}  {stamp}")
    click.echo(line(_COLUMNS))
    for row in rows:
        click.echo(line(row))
    if not rows:
        click.echo("(no queues: the app has no tasks and the server has no jobs for it)")
    click.echo("")
    sys.stdout.flush()
