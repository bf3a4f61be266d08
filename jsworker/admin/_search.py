"""Searching an app's jobs by text: the newest waiting jobs and dead letters, read from the
server, matched on their ids, arguments, caller headers and (dead letters) their reason and
error.

Nothing indexes a job's arguments, so a search reads messages, and a search that reads every
message of a million-job queue would take minutes: it reads the newest :data:`SCAN` waiting
jobs of every partition (one request each, through the subject index, taking nothing from any
worker) and the newest :data:`SCAN` dead letters (one short-lived consumer), and says how many
it read, so that "no match" reads as "none among these". Finished jobs leave no message to
read; those with a record are found by their id.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .._deadletters.letter import DeadLetter
from .._wire.headers import caller_headers, job_id_of
from ..jetstream.limits_stream import LimitsStream
from ..jetstream.pages import Reads, SubjectReader, read_range, take

if TYPE_CHECKING:
    from .._app import App
    from ..jetstream.connection import Connection

#: The most waiting jobs (each partition) and dead letters one search reads.
SCAN = 2000
#: The most matches one search lists.
LIMIT = 100

Place = Literal["waiting", "dead letter"]


@dataclass(frozen=True, slots=True)
class Match:
    """A job a search found: where (``waiting`` or ``dead letter``), who it is, its message's
    sequence (a dead letter's own for one), and what matched (``id``, ``arguments``,
    ``header <name>``, ``reason`` or ``error``)."""

    place: Place
    job_id: str
    queue: str
    task: str
    seq: int
    matched: str


@dataclass(frozen=True, slots=True)
class SearchResult:
    """What a search found, and what it read to find it: ``waiting`` jobs and ``letters``;
    ``more``: a match past :data:`LIMIT` was left out; ``arguments``: whether arguments were
    searched (not when payloads are not to be shown)."""

    text: str
    matches: tuple[Match, ...]
    waiting: int
    letters: int
    more: bool
    arguments: bool


def _matched(needle: str, job_id: str, headers: dict[str, str], body: bytes | None) -> str | None:
    """What of a job holds ``needle`` (lower case), first that matches, or None."""
    if needle in job_id.lower():
        return "id"
    if body is not None and needle in body.decode("utf-8", "replace").lower():
        return "arguments"
    for name, value in headers.items():
        if needle in value.lower():
            return f"header {name}"
    return None


async def search_jobs(
    app: App, conn: Connection, text: str, *, arguments: bool = True, scan: int = SCAN
) -> SearchResult:
    """The waiting jobs and dead letters (the newest ``scan`` of each) whose id, arguments
    (unless ``arguments`` is false), caller headers, or dead letter's reason or error hold
    ``text``, case-insensitively; newest first, waiting jobs before dead letters."""
    needle = text.lower()
    (waiting, read), (letters, letters_read) = await asyncio.gather(
        _waiting(app, conn, needle, arguments, scan), _letters(app, conn, needle, arguments, scan)
    )
    found = waiting + letters
    return SearchResult(text, tuple(found[:LIMIT]), read, letters_read, len(found) > LIMIT, arguments)


async def _waiting(
    app: App, conn: Connection, needle: str, arguments: bool, scan: int
) -> tuple[list[Match], int]:
    ns = app.namespace
    reads = Reads()
    sources = []
    for k in range(app.partition_count):
        stream = LimitsStream(conn, ns.partition_stream(k))
        reader = SubjectReader(stream, ns.queue_filter("*", k), reads, bodies=arguments)
        sources.append(reader.backward(await stream.last_seq() + 1, 1, scan))
    messages = await take(sources, True, scan * len(sources))
    found = []
    for msg in messages:
        parsed = ns.parse_job_subject(msg.subject)
        job_id = job_id_of(msg.headers, msg.seq)
        matched = _matched(needle, job_id, caller_headers(msg.headers), msg.body if arguments else None)
        if matched is not None and parsed is not None:
            found.append(Match("waiting", job_id, parsed[0], parsed[1], msg.seq, matched))
    return found, len(messages)


async def _letters(
    app: App, conn: Connection, needle: str, arguments: bool, scan: int
) -> tuple[list[Match], int]:
    ns = app.namespace
    last = await LimitsStream(conn, ns.dlq_stream).last_seq()
    if not last:
        return [], 0
    found = await read_range(
        conn, ns.dlq_stream, ns.dlq_subjects, max(1, last - scan + 1), end=last + 1, bodies=arguments
    )
    out = []
    for msg in reversed(found.messages):
        letter = DeadLetter.from_stored(msg)
        if needle in letter.reason.lower():
            matched: str | None = "reason"
        elif needle in f"{letter.error_type or ''}: {letter.error or ''}".lower():
            matched = "error"
        else:
            matched = _matched(needle, letter.job_id, caller_headers(letter.headers), letter.body)
        if matched is not None:
            out.append(Match("dead letter", letter.job_id, letter.queue, letter.task, letter.seq, matched))
    return out, found.reads
