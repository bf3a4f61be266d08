"""Jobs that ended without a dead letter (succeeded, cancelled, expired), listed from the
job-events stream (``App(events=True)``): no message of theirs is left in the job stream, and a
record is kept only for some (a success of a task that keeps no results leaves none).

Each is its event: ``succeeded``, ``cancelled`` or ``expired``, on a subject of its own
(``jsw.<app>.ev.<queue>.<task>.<kind>``), so a page is read like the dead letters' (one
short-lived consumer filtered on that subject, bodies for the job ids), and the counts come
from the stream's per-subject counts, for as long as the stream keeps its events.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Literal

from .._core.job_status import JobState
from .._core.paging import Page, seq_cursor
from .._errors import EventsNotFound
from ..events._schema import decode_event
from ..jetstream.history import stream_bounds
from ..jetstream.pages import range_page, subject_pages
from ._summary import JobPage, JobSummary, utc

if TYPE_CHECKING:
    from .._app import App
    from ..jetstream.connection import Connection

EndedState = Literal["succeeded", "cancelled", "expired"]
#: The states listed from their events.
ENDED_STATES: tuple[EndedState, ...] = ("succeeded", "cancelled", "expired")


def _missing(app: App) -> EventsNotFound:
    return EventsNotFound(
        f"no events stream {app.namespace.events_stream}: succeeded, cancelled and expired jobs are "
        "listed from job events (App(events=True))"
    )


async def ended_page(
    app: App,
    conn: Connection,
    state: EndedState,
    queue: str | None,
    task: str | None,
    limit: int,
    after: str | int | None,
    newest: bool,
) -> JobPage:
    """One page of the jobs that ended in ``state`` (of ``queue`` and ``task``), by their
    event's sequence; :class:`EventsNotFound` without an events stream."""
    ns = app.namespace
    cursor = seq_cursor(after)
    if await stream_bounds(conn, ns.events_stream) is None:
        raise _missing(app)
    subject = ns.event_subject(queue or "*", task or "*", state)
    found = await range_page(conn, ns.events_stream, subject, cursor, limit, newest=newest, bodies=True)
    items = []
    for msg in found.messages:
        event = decode_event(msg.body or b"")
        if event is None:
            continue  # written by a later version, or not an event at all
        items.append(
            JobSummary(
                id=event.job_id,
                state=JobState(state),
                queue=event.queue,
                task=event.task,
                seq=msg.seq,
                attempts=event.attempt,
                enqueued_at=utc(event.enqueued_at),
                finished_at=utc(event.ts),
                worker=event.worker,
                reason=event.reason,
            )
        )
    last = str(found.last) if found.last is not None else None
    return Page(tuple(items), last, found.reads)


async def ended_counts(app: App, conn: Connection, queue: str | None, task: str | None) -> dict[str, int]:
    """How many jobs ended in each of :data:`ENDED_STATES` (of ``queue`` and ``task``) among
    the events the stream keeps; nothing without an events stream (one ``STREAM.INFO``
    with a subject filter, and one more per 100,000 subjects)."""
    ns = app.namespace
    if await stream_bounds(conn, ns.events_stream) is None:
        return {}
    counts: Counter[str] = Counter(dict.fromkeys(ENDED_STATES, 0))
    async for page in subject_pages(conn, ns.events_stream, ns.event_subject(queue or "*", task or "*", "*")):
        for subject, n in page.items():
            kind = subject.rsplit(".", 1)[-1]
            if kind in ENDED_STATES:
                counts[kind] += n
    return dict(counts)
