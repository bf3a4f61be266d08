"""``jsworker events``: the job-event history of an app (``App(events=True)``).

Exit codes as for every command: 0 ok, 1 crashed, 2 usage error (a bad time, no events stream,
pyarrow missing), 3 cannot connect.
"""

from __future__ import annotations

import asyncio

import click

from .._observability.logging import configure_logging
from ..events._export import ExportReport, aexport_events
from ..events._reader import parse_time
from .connection import connection_options, load_connected_app
from .errors import command_errors


class _Time(click.ParamType[float]):
    """An ISO time or date (UTC unless it says otherwise) or a time ago (30m, 12h, 7d)."""

    name = "TIME"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        try:
            return parse_time(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@click.group()
def events() -> None:
    """Export the job-event history (apps created with App(events=True))."""


@events.command()
@click.argument("app_spec", metavar="MODULE[:ATTR]")
@click.option("--since", type=_Time(), default=None, help="First event: stored at or after TIME.")
@click.option("--until", type=_Time(), default=None, help="Last event: stored at or before TIME.")
@click.option(
    "--from-seq",
    type=click.IntRange(min=1),
    default=None,
    metavar="SEQ",
    help="First event: at this stream sequence (continue a previous export: its last + 1).",
)
@click.option(
    "--to",
    "to",
    type=click.Path(file_okay=False, writable=True),
    required=True,
    help="Directory for the Parquet files (created if missing).",
)
@click.option(
    "--rows-per-file",
    type=click.IntRange(min=1),
    default=1_000_000,
    show_default=True,
    help="At most this many events per file.",
)
@connection_options
def export(
    app_spec: str,
    since: float | None,
    until: float | None,
    from_seq: int | None,
    to: str,
    rows_per_file: int,
    **connection: str | None,
) -> None:
    """Write the job events of the App in MODULE to Parquet files in a directory.

    Reads from --since (an ISO time, or a time ago: 30m, 12h, 7d) or --from-seq, up to
    --until or the last event stored when the export starts. Files are named
    events-<first seq>-<last seq>.parquet. Messages that are not job events are skipped
    and counted.
    """
    if (since is None) == (from_seq is None):
        raise click.UsageError("say where to start: --since TIME or --from-seq SEQ (one of them)")
    if since is not None and until is not None and until < since:
        raise click.UsageError("--until is before --since")
    configure_logging("warning")
    app = load_connected_app(app_spec, connection)
    with command_errors("export failed"):
        report = asyncio.run(
            aexport_events(app, to, since=since, until=until, start_seq=from_seq, rows_per_file=rows_per_file)
        )
    _summary(report, to)


def _summary(report: ExportReport, to: str) -> None:
    for path in report.files:
        click.echo(str(path))
    skipped = f"; {report.skipped} message(s) skipped: not job events" if report.skipped else ""
    if report.events:
        click.echo(
            f"exported {report.events} event(s), seq {report.first_seq}..{report.last_seq}, "
            f"to {len(report.files)} file(s) in {to} in {report.seconds:.1f}s "
            f"({report.rate:,.0f} events/s){skipped}"
        )
    else:
        click.echo(f"no events to export{skipped}")
    if report.next_seq is not None:
        click.echo(f"to continue later: --from-seq {report.next_seq}")
