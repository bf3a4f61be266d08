"""Dead letters (``/dead-letters``): filtered by task and queue, paged both ways; one with its
error and, after a click, its payload pretty-printed; replay one, a selection or all of a
task; purge after a confirmation page."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..._core.paging import Page
from ..._deadletters.letter import DeadLetter
from ..._errors import JsworkerError
from ..._observability.logging import get_logger
from ..._wire.headers import CONTENT_TYPE
from ..._wire.names import validate_name
from .._errors import refuse
from .._paging import both_ways, letter_cursor
from .._payloads import readable
from .._web import (
    Dashboard,
    action,
    audit,
    audited,
    back,
    count,
    counted,
    field,
    link,
    many,
    page,
    render,
    sequence,
)

PAGE = 50

log = get_logger("jsworker.ui")


def _filters(source: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The task and queue a query or form names (each checked), None for any."""
    task, queue = field(source, "task"), field(source, "queue")
    return (
        validate_name("task", task) if task is not None else None,
        validate_name("queue", queue) if queue is not None else None,
    )


@page
async def letters_page(request: Request, d: Dashboard) -> Response:
    """A page of dead letters and how many there are."""
    query = request.query_params
    task, queue = _filters(query)
    newest = query.get("order") == "newest"
    limit = count(query, "limit", PAGE, 500)

    async def fetch(cursor: str | None, newest_first: bool, size: int) -> Page[DeadLetter]:
        return await d.admin.dead_letters(task, queue, size, cursor, newest_first=newest_first)

    shown = await both_ways(
        fetch,
        letter_cursor,
        newest=newest,
        limit=limit,
        after=field(query, "after"),
        before=field(query, "before"),
    )
    total = await d.admin.count_dead_letters(task, queue)
    replaying = sorted(name for name, replay in d.replays.items() if not replay.done())
    return render(
        request,
        "dead_letters.html",
        nav="dead_letters",
        shown=shown,
        total=total,
        task=task,
        queue=queue,
        tasks=sorted(d.app.tasks),
        queues=sorted(d.app.queues),
        newest=newest,
        limit=limit,
        replaying=replaying,
    )


@page
async def letter_page(request: Request, d: Dashboard) -> Response:
    """One dead letter by its sequence, its payload when asked for."""
    ref: str = request.path_params["ref"]
    show = field(request.query_params, "show")
    if show is not None and show != "payload":
        raise refuse(400, "show what? payload")
    if show is not None and not d.settings.payloads:
        raise refuse(403, "this dashboard shows no payloads")
    if not (ref.isascii() and ref.isdigit()):
        # By job id the server cannot find one without reading every dead letter's headers
        # (seconds for 100,000 of them): the pages link dead letters by their number.
        raise refuse(400, "a dead letter is found by its number (#); a failed job's page links to its task's")
    letter = await d.admin.dead_letter(sequence(ref))
    shown = readable(letter.body or b"", letter.headers.get(CONTENT_TYPE)) if show else None
    # What the edit-and-replay form starts from: the payload as sent (once shown, not cut).
    editable = (letter.body or b"").decode("utf-8", "replace") if show and not letter.original_size else None
    return render(
        request, "dead_letter.html", nav="dead_letters", letter=letter, shown=shown, editable=editable
    )


@page
async def purge_confirm(request: Request, d: Dashboard) -> Response:
    """Asks before a purge: how many dead letters would go."""
    task, queue = _filters(request.query_params)
    total = await d.admin.count_dead_letters(task, queue)
    return render(
        request, "confirm_purge_letters.html", nav="dead_letters", task=task, queue=queue, total=total
    )


@action
async def replay(request: Request, d: Dashboard, form: FormData) -> tuple[str, str]:
    """Replays the selected dead letters, or every one of a task (``all_of_task``)."""
    fallback = link(request, "/dead-letters")
    if field(form, "all_of_task") is not None:
        task = validate_name("task", field(form, "all_of_task") or "")
        running = d.replays.get(task)
        if running is not None and not running.done():
            return f"The dead letters of {task} are being replayed already.", back(form, fallback)
        # Every one of a task may be thousands, which take a while: replayed beside the
        # request, the page following the count as it falls.
        audit(request, "replay_started", task=task)
        d.replays[task] = asyncio.create_task(_replay_all(d, task, audited(request)))
        said = f"Replaying the dead letters of {task}: their count below falls as they go."
        return said, back(form, fallback)
    seqs = many(form, "seq", sequence)
    jobs = await d.admin.replay_dead_letters(seqs)
    audit(request, "replay", dead_letters=seqs, job_ids=[job.id for job in jobs])
    return f"Replayed {counted(len(jobs), 'dead letter')}.", back(form, fallback)


async def _replay_all(d: Dashboard, task: str, audit_done: Callable[..., None]) -> None:
    """Replay every dead letter of ``task``; its audit line once done (or why it stopped)."""
    try:
        jobs = await d.admin.replay_dead_letters(task=task)
    except JsworkerError as exc:
        audit_done("replay", task=task, error=str(exc))
    except Exception as exc:  # no request is left to answer: said here, or never
        log.exception("ui.replay_failed", task=task)
        audit_done("replay", task=task, error=repr(exc))
    else:
        audit_done("replay", task=task, job_ids=[job.id for job in jobs])


@action
async def replay_edited(request: Request, d: Dashboard, form: FormData) -> tuple[str, str]:
    """Replays one dead letter with the payload the form gives (its arguments corrected)."""
    if not d.settings.payloads:
        raise refuse(403, "this dashboard shows no payloads, so it edits none")
    seq = sequence(request.path_params["seq"])
    body = field(form, "body")
    if body is None:
        raise refuse(400, "replay with what? the form gave no payload")
    job = await d.admin.replay_edited(seq, body.encode())
    audit(request, "replay_edited", dead_letters=[seq], job_ids=[job.id])
    return f"Replayed dead letter #{seq} with edited arguments: {job.id} runs again.", link(
        request, f"/jobs/{job.id}"
    )


@action
async def delete(request: Request, d: Dashboard, form: FormData) -> tuple[str, str]:
    """Deletes one dead letter for good (the page asked first)."""
    seq = sequence(request.path_params["seq"])
    deleted = await d.admin.delete_dead_letter(seq)
    audit(request, "delete_dead_letter", seq=seq, deleted=deleted)
    done = f"Deleted dead letter #{seq}." if deleted else f"Dead letter #{seq} was gone already."
    return done, back(form, link(request, "/dead-letters"))


@action
async def purge(request: Request, d: Dashboard, form: FormData) -> tuple[str, str]:
    """Purges the dead letters the confirmation page named."""
    task, queue = _filters(form)
    if field(form, "confirm") != "purge":
        # Back to the question, saying why: the operator may have mistyped.
        return "Nothing purged: type purge to confirm.", link(
            request, "/dead-letters/purge", task=task, queue=queue
        )
    removed = await d.admin.purge_dead_letters(task, queue)
    audit(request, "purge_dead_letters", task=task, queue=queue, removed=removed)
    done = f"Purged {counted(removed, 'dead letter')}."
    return done, link(request, "/dead-letters", task=task, queue=queue)


routes = [
    Route("/dead-letters", letters_page, methods=["GET"], name="dead_letters"),
    Route("/dead-letters/replay", replay, methods=["POST"], name="dead_letters_replay"),
    Route("/dead-letters/purge", purge_confirm, methods=["GET"], name="dead_letters_purge_confirm"),
    Route("/dead-letters/purge", purge, methods=["POST"], name="dead_letters_purge"),
    Route("/dead-letters/{ref}", letter_page, methods=["GET"], name="dead_letter"),
    Route("/dead-letters/{seq}/delete", delete, methods=["POST"], name="dead_letter_delete"),
    Route("/dead-letters/{seq}/replay-edited", replay_edited, methods=["POST"], name="dead_letter_edited"),
]
