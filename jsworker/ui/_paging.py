"""Paging both ways over a listing that only pages one way.

An Admin listing hands out pages in one order from a cursor (its ``after``). The page before
the one shown is the listing in the other order from the shown page's first item, turned
around; so a page carries two cursors: ``before`` (its first item's) and ``after`` (its last
item's), each None where nothing lies that way. A page reads one item more than it shows, to
know whether the listing goes on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from .._core.job_status import JobState
from .._core.paging import Page
from .._deadletters.letter import DeadLetter
from ..admin import Admin, JobSummary, ListedState

T = TypeVar("T")

#: Reads one page: (cursor or None, newest first?, limit) -> page.
Fetch = Callable[[str | None, bool, int], Awaitable[Page[T]]]


@dataclass(frozen=True, slots=True)
class Shown(Generic[T]):
    """One page as shown: its items in the order asked for, the cursors of the pages before
    and after it (None: nothing there), whether it is not the first page, and what it cost."""

    items: tuple[T, ...]
    before: str | None
    after: str | None
    moved: bool
    reads: int


async def both_ways(
    fetch: Fetch[T],
    cursor: Callable[[T], str],
    *,
    newest: bool,
    limit: int,
    after: str | None,
    before: str | None,
) -> Shown[T]:
    """The ``limit`` items after ``after`` or, given ``before``, those before it, in the order
    asked (newest first when ``newest``)."""
    if before is not None:
        page = await fetch(before, not newest, limit + 1)
        items = tuple(reversed(page.items[:limit]))
        more_before, more_after = len(page.items) > limit, True
    else:
        page = await fetch(after, newest, limit + 1)
        items = page.items[:limit]
        more_before, more_after = after is not None, len(page.items) > limit
    return Shown(
        items=items,
        before=cursor(items[0]) if items and more_before else None,
        after=cursor(items[-1]) if items and more_after else None,
        moved=after is not None or before is not None,
        reads=page.reads,
    )


#: A page with nothing on it and nowhere to go.
EMPTY: Shown[JobSummary] = Shown((), None, None, False, 0)


async def jobs_shown(
    admin: Admin,
    state: ListedState,
    queue: str | None,
    task: str | None,
    *,
    newest: bool,
    limit: int,
    after: str | None,
    before: str | None,
) -> Shown[JobSummary]:
    """A page of the jobs in ``state`` (of ``queue`` and ``task``) as its cursors ask."""

    async def fetch(cursor: str | None, newest_first: bool, size: int) -> Page[JobSummary]:
        return await admin.jobs(queue, state, task, size, cursor, newest_first=newest_first)

    return await both_ways(fetch, job_cursor, newest=newest, limit=limit, after=after, before=before)


def job_cursor(job: JobSummary) -> str:
    """A job's place in its listing: its sequence, or for a scheduled job
    ``<due ms>.<queue>.<job id>``."""
    if job.state is JobState.SCHEDULED and job.scheduled_for is not None:
        return f"{round(job.scheduled_for.timestamp() * 1000)}.{job.queue}.{job.id}"
    return str(job.seq)


def letter_cursor(letter: DeadLetter) -> str:
    """A dead letter's place in its listing: its sequence."""
    return str(letter.seq)
