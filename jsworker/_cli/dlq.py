"""``jsworker dlq``: list, show, replay and purge an app's dead letters.

Exit codes as for every command: 0 ok, 1 crashed, 2 usage error (including a dead letter that
does not exist or cannot be replayed, and a purge that needs ``--yes``), 3 cannot connect.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click

from .._deadletters import DeadLetter, ReplayedJob
from .._errors import SerializationError
from .._observability.logging import configure_logging, printable
from ..admin import Admin
from .connection import connection_options, load_connected_app
from .errors import EXIT_USAGE, command_errors, fail

T = TypeVar("T")

_APP = click.argument("app_spec", metavar="MODULE[:ATTR]")
_TASK = click.option("--task", "-t", default=None, help="Only dead letters of this task.")
_QUEUE = click.option("--queue", "-q", default=None, help="Only dead letters of this queue.")
_JSON = click.option("--json", "as_json", is_flag=True, help="JSON instead of text (one object a line).")
# Dead letters listed per request: headers only, a few hundred bytes each.
_PAGE = 1000


@click.group()
def dlq() -> None:
    """Inspect, replay and purge dead letters (jobs the workers gave up on)."""


def _run(app_spec: str, connection: dict[str, Any], work: Callable[[Admin], Awaitable[T]]) -> T:
    """Load the app, run ``work`` with its Admin, and turn failures into one line and a code."""
    # Library events go to stderr, below warnings not at all: stdout is the command's output.
    configure_logging("warning")
    app = load_connected_app(app_spec, connection)

    async def main() -> T:
        async with Admin(app, purpose="dlq") as admin:
            return await work(admin)

    with command_errors():
        return asyncio.run(main())


@dlq.command("list")
@_APP
@_TASK
@_QUEUE
@click.option(
    "--limit", "-n", type=click.IntRange(min=1), default=None, help="At most this many (oldest first)."
)
@_JSON
@connection_options
def list_(
    app_spec: str,
    task: str | None,
    queue: str | None,
    limit: int | None,
    as_json: bool,
    **connection: str | None,
) -> None:
    """List dead letters, oldest first.

    Columns: sequence, failure time (UTC), job id, task, queue, attempts, reason.
    """
    letters = _run(app_spec, connection, lambda admin: _listed(admin, task, queue, limit))
    if as_json:
        for letter in letters:
            click.echo(json.dumps(letter_json(letter)))
    elif not letters:
        click.echo("no dead letters")
    else:
        click.echo(_table(letters, shutil.get_terminal_size((120, 24)).columns))


async def _listed(admin: Admin, task: str | None, queue: str | None, limit: int | None) -> list[DeadLetter]:
    """Dead letters oldest first, at most ``limit``, read a page at a time."""
    letters: list[DeadLetter] = []
    after: str | None = None
    while limit is None or len(letters) < limit:
        size = _PAGE if limit is None else min(_PAGE, limit - len(letters))
        page = await admin.dead_letters(task, queue, limit=size, after=after)
        letters += page.items
        if page.next_after is None:
            break
        after = page.next_after
    return letters


def _shown(value: str) -> str:
    # Names and headers come from the message: a hostile one must not drive the terminal.
    return printable(value, 200)


def _table(letters: list[DeadLetter], width: int) -> str:
    """Aligned columns; the reason takes what the terminal width leaves (at least 20)."""
    header = ("SEQ", "FAILED AT", "JOB ID", "TASK", "QUEUE", "ATTEMPTS")
    rows = [
        (
            str(d.seq),
            d.failed_at_iso or "-",
            *map(_shown, (d.job_id, d.task, d.queue)),
            str(d.attempts or "-"),
        )
        for d in letters
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fixed = sum(widths) + 2 * len(widths)
    room = max(20, width - fixed)

    def line(cells: tuple[str, ...], reason: str) -> str:
        left = "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))
        if len(reason) > room:
            reason = reason[: room - 3] + "..."
        return f"{left}  {reason}".rstrip()

    out = [line(header, "REASON")]
    out += [line(row, _shown(d.reason)) for row, d in zip(rows, letters, strict=True)]
    return "\n".join(out)


def letter_json(letter: DeadLetter) -> dict[str, Any]:
    """Every field of ``letter``, JSON-ready; a loaded body as ``payload`` (decoded JSON, else
    None) and ``body_text`` (UTF-8 text, else None)."""
    out: dict[str, Any] = {
        "seq": letter.seq,
        "job_id": letter.job_id,
        "task": letter.task,
        "queue": letter.queue,
        "attempts": letter.attempts,
        "reason": letter.reason,
        "error_type": letter.error_type,
        "error": letter.error,
        "traceback": letter.traceback,
        "failed_at": letter.failed_at,
        "failed_at_iso": letter.failed_at_iso,
        "subject": letter.subject,
        "headers": dict(letter.headers),
        "size": letter.size,
        "original_size": letter.original_size,
        "headers_dropped": list(letter.headers_dropped),
    }
    if letter.body is not None:
        try:
            out["payload"] = letter.payload()
        except SerializationError:
            out["payload"] = None
        try:
            out["body_text"] = letter.body.decode()
        except UnicodeDecodeError:
            out["body_text"] = None
    return out


@dlq.command()
@_APP
@click.argument("ref")
@_JSON
@connection_options
def show(app_spec: str, ref: str, as_json: bool, **connection: str | None) -> None:
    """Show one dead letter in full.

    REF is its sequence, or a job id (the newest dead letter of that job).
    """
    letter = _run(app_spec, connection, lambda admin: admin.dead_letter(ref))
    if as_json:
        click.echo(json.dumps(letter_json(letter)))
        return
    fields = [
        ("seq", str(letter.seq)),
        ("job id", letter.job_id),
        ("task", letter.task),
        ("queue", letter.queue),
        ("subject", letter.subject),
        ("attempts", str(letter.attempts or "-")),
        ("failed at", letter.failed_at_iso or "-"),
        ("reason", letter.reason),
        ("error", f"{letter.error_type}: {letter.error}" if letter.error_type else "-"),
    ]
    for name, value in fields:
        click.echo(f"{name + ':':<11}{_shown(value)}")
    click.echo("headers:")
    for key, value in sorted(letter.headers.items()):
        click.echo(f"  {_shown(key)}: {_shown(value)}")
    if letter.headers_dropped:
        click.echo(f"  (left out to fit: {_shown(', '.join(letter.headers_dropped))})")
    cut = f", cut from {letter.original_size}: cannot be replayed" if letter.original_size is not None else ""
    click.echo(f"payload ({letter.size} bytes{cut}):")
    click.echo(letter.pretty_payload())
    if letter.traceback:
        click.echo("traceback:")
        click.echo(letter.traceback.rstrip("\n"))


@dlq.command()
@_APP
@click.argument("refs", nargs=-1, metavar="[REF]...")
@_TASK
@click.option("--all", "all_", is_flag=True, help="Every dead letter (of --task, if given).")
@connection_options
def replay(
    app_spec: str, refs: tuple[str, ...], task: str | None, all_: bool, **connection: str | None
) -> None:
    """Enqueue dead letters again and remove them.

    The jobs keep their job ids and start at attempt 1. REF is a sequence or a job id. Without
    REFs, --task replays every dead letter of that task, --all every dead letter. Prints one
    line per job: old sequence -> job id, new stream sequence.
    """
    if refs and all_:
        raise click.UsageError("give REFs or --all, not both")
    if not refs and task is None and not all_:
        raise click.UsageError("say what to replay: REF..., --task TASK or --all")
    jobs = _run(
        app_spec, connection, lambda admin: admin.replay_dead_letters(list(refs) or None, task=task, all=all_)
    )
    for job in jobs:
        old = job.replayed_from if isinstance(job, ReplayedJob) else "?"
        note = "  (already enqueued: duplicate)" if job.duplicate else ""
        click.echo(f"{old} -> job {job.id} ({job.task}), stream seq {job.seq}{note}")
    if not jobs:
        click.echo("nothing to replay")


@dlq.command()
@_APP
@_TASK
@_QUEUE
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@connection_options
def purge(app_spec: str, task: str | None, queue: str | None, yes: bool, **connection: str | None) -> None:
    """Delete dead letters for good.

    Those of --task and/or --queue, else all of them. Asks first, unless --yes.
    """
    if not yes and not sys.stdin.isatty():
        fail("purge deletes dead letters for good; pass --yes when stdin is not a terminal", EXIT_USAGE)
    what = " and ".join(f"{k} {v!r}" for k, v in (("task", task), ("queue", queue)) if v is not None)
    what = f" of {what}" if what else ""

    async def work(admin: Admin) -> int | None:
        found = await admin.count_dead_letters(task=task, queue=queue)
        if found == 0:
            return 0
        # Asking inside the loop blocks it, which is harmless here: nothing else runs on it.
        if not yes and not click.confirm(f"Delete {found} dead letter(s){what} for good?", default=False):
            return None
        return await admin.purge_dead_letters(task=task, queue=queue)

    removed = _run(app_spec, connection, work)
    if removed is None:
        click.echo("nothing purged")
    else:
        click.echo(f"purged {removed} dead letter(s){what}")
