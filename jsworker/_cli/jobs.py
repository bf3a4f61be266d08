"""``jsworker jobs``: one job's status, result and cancel, by its id, and pages of jobs by
state (``list``, through :class:`~jsworker.admin.Admin`).

Exit codes: 0 ok; 1 crashed; 2 usage error or an unknown job (nothing to cancel); 3 cannot
connect, or a permission the user lacks; 4 (``result``) the job did not succeed (failed,
cancelled or expired), after printing why; 5 (``result``) it has not finished within
``--wait`` seconds.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import click

from .._app import App
from .._core.paging import MAX_LIMIT
from .._errors import JobCancelled, JobFailed, JobNotFound
from .._lifecycle.state import JobState
from .._observability.logging import configure_logging, printable
from ..admin import LISTED_STATES, Admin, JobPage, ListedState
from .connection import connection_options, load_connected_app
from .errors import EXIT_USAGE, command_errors, fail

T = TypeVar("T")

EXIT_NOT_SUCCEEDED = 4
EXIT_NOT_FINISHED = 5

_APP = click.argument("app_spec", metavar="MODULE[:ATTR]")
_JOB = click.argument("job_id")


def _run(app_spec: str, connection: dict[str, Any], work: Callable[[App], Awaitable[T]]) -> T:
    """Load the app, run ``work`` on its connection, close it; failures become one line and a code."""
    configure_logging("warning")
    app = load_connected_app(app_spec, connection)

    async def main() -> T:
        try:
            return await work(app)
        finally:
            await app.aclose()

    with command_errors():
        return asyncio.run(main())


@click.group()
def jobs() -> None:
    """Jobs by state (list), and one job by its id: status, result, cancel."""


_COLUMNS = ("ID", "TASK", "QUEUE", "STATE", "ATTEMPTS", "ENQUEUED/DUE", "WORKER")


@jobs.command("list")
@_APP
@click.option("--queue", "-q", default=None, help="Only jobs of this queue (default: all).")
@click.option(
    "--state",
    "-s",
    type=click.Choice(LISTED_STATES),
    default="queued",
    show_default=True,
    help="Which jobs: failed lists the dead letters.",
)
@click.option("--task", "-t", default=None, help="Only jobs of this task.")
@click.option("--limit", "-n", type=click.IntRange(1, MAX_LIMIT), default=50, show_default=True)
@click.option("--after", default=None, metavar="CURSOR", help="The cursor a previous page printed.")
@click.option("--newest-first", is_flag=True, help="Newest first (scheduled: latest due first).")
@click.option("--json", "as_json", is_flag=True, help="The page as one JSON object.")
@connection_options
def list_(
    app_spec: str,
    queue: str | None,
    state: ListedState,
    task: str | None,
    limit: int,
    after: str | None,
    newest_first: bool,
    as_json: bool,
    **connection: str | None,
) -> None:
    """One page of the jobs in a state, oldest first (scheduled: by due time), then the
    cursor of the next page (pass it as --after). Runs as the operator.

    \b
    ENQUEUED/DUE  when it was enqueued; for a scheduled job when it is due (UTC)
    WORKER        the worker running it (its id in `jsworker workers`)
    """
    configure_logging("warning")
    app = load_connected_app(app_spec, connection)

    async def listing() -> JobPage:
        async with Admin(app, purpose="jobs") as admin:
            return await admin.jobs(queue, state, task, limit, after, newest_first=newest_first)

    with command_errors():
        page = asyncio.run(listing())
    if as_json:
        doc = {"items": [job.as_dict() for job in page.items], "next_after": page.next_after}
        click.echo(json.dumps(doc))
        return
    _page_table(page, state)


def _page_table(page: JobPage, state: str) -> None:
    def when(moment: datetime | None) -> str:
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ") if moment is not None else "-"

    rows = [
        (
            *(printable(value, 64) for value in (job.id, job.task, job.queue)),
            job.state.value,
            str(job.attempts) if job.attempts is not None else "-",
            when(job.scheduled_for if job.state is JobState.SCHEDULED else job.enqueued_at),
            printable(job.worker, 64) if job.worker else "-",
        )
        for job in page.items
    ]
    if not rows:
        click.echo(f"no {state} jobs")
    else:
        widths = [max(len(r[i]) for r in [_COLUMNS, *rows]) for i in range(len(_COLUMNS))]
        for row in [_COLUMNS, *rows]:
            click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    # The cursor as the shell takes it back: its tokens are names and digits.
    click.echo(f"next: --after {page.next_after}" if page.next_after is not None else "(end)")


@jobs.command()
@_APP
@_JOB
@click.option("--json", "as_json", is_flag=True, help="The whole status as one JSON object.")
@connection_options
def status(app_spec: str, job_id: str, as_json: bool, **connection: str | None) -> None:
    """Where job JOB_ID is: scheduled, queued, running, retrying, succeeded, failed, cancelled,
    expired; exit 2 when it is unknown (never enqueued, or finished without a record)."""
    found = _run(app_spec, connection, lambda app: app.astatus(job_id))
    if as_json:
        click.echo(json.dumps(found.as_dict()))
    else:
        details = [
            f"{name}={value}"
            for name, value in found.as_dict().items()
            if value is not None and name not in ("id", "state", "error")
        ]
        click.echo(" ".join([found.id, found.state.value, *details]))
        if found.error is not None:
            click.echo(f"error: {found.error.type}: {found.error.message}")
    if found.state is JobState.UNKNOWN:
        # Not an error of the command: the server keeps nothing of such a job.
        click.echo(
            "nothing is known of it: never enqueued, or finished with no record kept (a task "
            "without store_result keeps none of a first-attempt success), or its record expired"
        )
        raise SystemExit(EXIT_USAGE)


@jobs.command()
@_APP
@_JOB
@click.option(
    "--wait",
    type=click.FloatRange(min=0),
    default=0.0,
    metavar="SECONDS",
    help="Wait this long for it to finish.",
)
@connection_options
def result(app_spec: str, job_id: str, wait: float, **connection: str | None) -> None:
    """Print job JOB_ID's return value as JSON. Exit 4 when it failed, was cancelled or
    expired; 5 when it has not finished within --wait seconds; 2 when it is unknown."""

    async def value(app: App) -> Any:
        try:
            return await app.job(job_id).aresult(timeout=wait or 0.001)
        except TimeoutError:
            state = (await app.astatus(job_id)).state.value
            fail(f"job {job_id} has not finished ({state})", EXIT_NOT_FINISHED)
        except JobNotFound as exc:
            fail(str(exc), EXIT_USAGE)
        except (JobFailed, JobCancelled) as exc:
            fail(str(exc), EXIT_NOT_SUCCEEDED)

    click.echo(json.dumps(_run(app_spec, connection, value), default=repr))


@jobs.command()
@_APP
@_JOB
@connection_options
def cancel(app_spec: str, job_id: str, **connection: str | None) -> None:
    """Cancel job JOB_ID: a delayed job before it fires, a queued one before it starts, a
    running one where it runs. Exit 0 when cancelled, 2 when there was nothing to cancel
    (unknown, or already finished)."""
    if not _run(app_spec, connection, lambda app: app.acancel(job_id)):
        fail(f"nothing to cancel: job {job_id!r} is unknown or already finished", EXIT_USAGE)
    click.echo(f"{job_id}: cancelled")
