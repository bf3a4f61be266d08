"""``jsworker enqueue``: one job from a shell or a script, through ``App.asend_task`` (so the
task need not be declared by the module, only its app: a worker that has it runs it).

Exit codes as for every command: 0 stored (or a duplicate of a job that holds its id), 1
crashed, 2 usage error (arguments that are not JSON, an invalid id or name), 3 cannot
connect or store it (the job may be stored all the same: enqueue it again under the id
printed, which cannot make a second one).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import click

from .._enqueue.receipt import Job
from .._errors import EnqueueError
from .._observability.logging import configure_logging
from .connection import connection_options, load_connected_app
from .errors import command_errors


def _json_of(text: str, kind: type, what: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON ({exc})", param_hint=what) from None
    if not isinstance(value, kind):
        raise click.BadParameter(f"a JSON {'array' if kind is list else 'object'}", param_hint=what)
    return value


@click.command()
@click.argument("app_spec", metavar="MODULE[:ATTR]")
@click.argument("task")
@click.argument("args_json", metavar="[ARGS_JSON]", default="[]")
@click.option("--kwargs", "kwargs_json", default="{}", metavar="JSON", help="Keyword arguments (JSON).")
@click.option(
    "--countdown", type=click.FloatRange(min=0), default=None, metavar="SECONDS", help="Run it later."
)
@click.option(
    "--job-id", default=None, help="Its id (default: a new one); one job of an id waits or runs at once."
)
@click.option("--queue", default=None, help="Send it to this queue rather than its task's.")
@click.option("--json", "as_json", is_flag=True, help="Print the receipt as JSON.")
@connection_options
def enqueue(
    app_spec: str,
    task: str,
    args_json: str,
    kwargs_json: str,
    countdown: float | None,
    job_id: str | None,
    queue: str | None,
    as_json: bool,
    **connection: str | None,
) -> None:
    """Enqueue one job of TASK with ARGS_JSON (a JSON array, default none) and print its id;
    a job id that a job waiting or running holds prints that job's, marked duplicate."""
    configure_logging("warning")
    args = _json_of(args_json, list, "ARGS_JSON")
    kwargs = _json_of(kwargs_json, dict, "--kwargs")
    app = load_connected_app(app_spec, connection)
    options: dict[str, Any] = {"queue": queue, "countdown": countdown}
    if job_id is not None:
        options["job_id"] = job_id

    async def main() -> Job:
        try:
            return await app.asend_task(task, args, kwargs, **options)
        except EnqueueError as exc:
            if exc.job_id and exc.job_id not in str(exc):
                # What the caller needs to try again without making a second job.
                raise EnqueueError(f"{exc} (job id {exc.job_id})", job_id=exc.job_id) from exc
            raise
        finally:
            await app.aclose()

    with command_errors():
        job = asyncio.run(main())
    if as_json:
        due = job.scheduled_for.isoformat() if job.scheduled_for is not None else None
        receipt = {"id": job.id, "task": job.task, "queue": job.queue, "duplicate": job.duplicate, "due": due}
        click.echo(json.dumps(receipt))
        return
    said = " (duplicate: a job with this id waits or runs)" if job.duplicate else ""
    due = f", due {job.scheduled_for:%Y-%m-%dT%H:%M:%SZ}" if job.scheduled_for is not None else ""
    click.echo(f"{job.id}{said}{due}")
