"""Listing an app's jobs by state, a page at a time, from what the server holds.

=========  ==================================================================================
state      how a page is read, and what it costs the server
=========  ==================================================================================
queued     The job stream on the queue's subjects (all queues: ``jsw.<app>.q.>``) in sequence
           order from the cursor, past the sequence the queue's consumer has delivered: one
           ``CONSUMER.INFO`` (``CONSUMER.LIST`` for all queues), then one ``STREAM.MSG.GET``
           (``next_by_subj``, through the subject index) a job listed plus one that finds the
           end. Across queues, jobs handed out after the cursor are read and passed over.
           A fair queue's intake is read beside it the same way (its markers passed over):
           the jobs waiting for their partition's turn, with that reason.
running    The jobs each queue's consumer has handed out and the server still holds (sequence
reserved   at most its delivered one): one ``MSG.GET`` a job, one read of its record in the
retrying   jobs bucket (a ``retrying`` record of this very message whose next attempt is
           still to come: retrying), and for the others one question on
           ``jsw.<app>.held.<id>`` that every worker hears and the one holding it answers
           (who, since when, which attempt, or why it holds it back; up to half a second
           when none does), then one read of the worker registry to name the worker. Running
           are those a worker says it started; reserved the others, with why they have not
           started (see :func:`~jsworker._lifecycle.lookup.holder_state`). Bounded by the
           jobs in flight.
scheduled  ``STREAM.INFO`` listing the delayed jobs' subjects (``...sched.at.<queue>.<due>.<id>``:
           due time and id are in the subject), one answer per 100,000 subjects (about 60
           bytes each), of which the ``limit`` next by due time are kept; then one
           ``MSG.GET`` a job shown. Every page lists all the subjects again.
failed     The dead-letter stream through a consumer of the page's own from the cursor
           (headers only: create, a fetch, delete): the headers of the dead letters shown.
=========  ==================================================================================

Newest first, the server has no "previous message": the job stream is read in windows of
sequences below the cursor, each forward, doubling while they hold too few
(:mod:`jsworker.jetstream.pages`); a scheduled page keeps the latest due instead.
A task filter is the server's for jobs and dead letters (their subjects name the task) and
the client's for delayed jobs (read and passed over). Memory is one page whatever the
stream holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import heapq
import itertools
import time
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Literal

from .._core.paging import Page, seq_cursor
from .._deadletters.admin import DeadLetters
from .._errors import ConfigurationError, ServerVersionError
from .._lifecycle.bucket import Records
from .._lifecycle.lookup import UNHELD, holder_said, holder_state, progress_said
from .._lifecycle.state import JobRecord, JobState
from .._registry.entries import REGISTRY_SINCE, live_workers
from .._wire.headers import MOVED, TASK
from .._wire.names import parse_place, place_token, validate_name
from ..jetstream.api import StreamRequestError
from ..jetstream.connection import Connection
from ..jetstream.inspect import consumer_facts, delivered_seq
from ..jetstream.limits_stream import LimitsStream, StoredMessage
from ..jetstream.pages import Reads, SubjectReader, subject_pages, take
from ..jetstream.service import gather
from ._summary import (
    JobPage,
    JobSummary,
    dead_job,
    delayed_job,
    job_id_in,
    retrying_job,
    turn_job,
    utc,
    waiting_job,
)

if TYPE_CHECKING:
    from .._app import App

#: What a listing of jobs handed out keeps: the running, the reserved, the retrying, or all of
#: them but the retrying (``handed_out``: what the workers hold, for the workers' view).
HandedOut = Literal["running", "reserved", "retrying", "handed_out"]
#: The states read from the job, schedules and dead-letter streams.
StreamState = Literal["scheduled", "queued", "failed"] | HandedOut

# How long a running job's holder gets to say so: a live worker answers within milliseconds.
_HELD_WAIT = 0.5
#: A delayed job's place in due order: (due in unix ms, queue, job id), its subject's tokens.
_Due = tuple[int, str, str]


class JobListing:
    """Pages of ``app``'s jobs over ``conn`` (an operator's), dead letters through ``letters``."""

    def __init__(self, app: App, conn: Connection, letters: DeadLetters, partition: int = 0) -> None:
        """``partition``: the job stream whose queued and handed-out jobs it reads."""
        self.app = app
        self.conn = conn
        self.letters = letters
        self.ns = app.namespace
        self.partition = partition
        self.jobs = LimitsStream(conn, self.ns.partition_stream(partition))
        self.schedules = LimitsStream(conn, self.ns.schedules_stream)
        self.records = Records(conn, self.ns)

    async def page(
        self,
        state: StreamState,
        queue: str | None,
        task: str | None,
        limit: int,
        after: str | int | None,
        newest: bool,
    ) -> JobPage:
        """One page of the jobs in ``state`` (see the module for how each is read)."""
        if state == "failed":
            letters = await self.letters.page(task, queue, limit=limit, after=after, newest_first=newest)
            return Page(tuple(map(dead_job, letters.items)), letters.next_after, letters.reads)
        if state == "scheduled":
            return await self._scheduled(queue, task, limit, _due_cursor(after), newest)
        return await self._in_partitions(state, queue, task, limit, after, newest)

    async def _in_partitions(
        self,
        state: HandedOut | Literal["queued"],
        queue: str | None,
        task: str | None,
        limit: int,
        after: str | int | None,
        newest: bool,
    ) -> JobPage:
        """A page of the jobs in ``state`` from the job streams of the partitions in turn, from
        the one ``after`` names (its cursor is ``<seq>``, or ``<seq>.<partition>`` past 0):
        sequence order within each partition (``newest``: latest first), partition after
        partition."""
        place = parse_place(str(after)) if after is not None else (0, 0)
        if place is None:
            raise ConfigurationError(f"not a cursor of this listing: {str(after)[:40]!r} (a stream sequence)")
        first, seq = place
        items: list[JobSummary] = []
        reads = 0
        for k in range(first, self.app.partition_count):
            listing = self if k == self.partition else JobListing(self.app, self.conn, self.letters, k)
            cursor = seq_cursor(seq) if k == first else 0
            need = limit - len(items)
            page = await listing.partition_page(state, queue, task, need, cursor, newest)
            items += page.items
            reads += page.reads
            if page.next_after is not None:
                return Page(tuple(items), place_token(int(page.next_after), k), reads)
        return Page(tuple(items), None, reads)

    async def partition_page(
        self,
        state: HandedOut | Literal["queued"],
        queue: str | None,
        task: str | None,
        limit: int,
        cursor: int,
        newest: bool,
    ) -> JobPage:
        """One page of the jobs in ``state`` that this listing's partition holds, from
        stream sequence ``cursor``."""
        if state == "queued":
            return await self._queued(queue, task, limit, cursor, newest)
        return await self._handed_out(state, queue, task, limit, cursor, newest)

    def _filters(self, queue: str | None, task: str | None) -> list[str]:
        # A periodic tick fired to its task's subject has no id token: a task's jobs are on
        # two filters, read together in sequence order.
        k = self.partition
        if task is None:
            return [self.ns.queue_filter(queue or "*", k)]
        return [
            self.ns.job_subject(queue or "*", task, partition=k),
            self.ns.job_subject(queue or "*", task, "*", k),
        ]

    async def _delivered(self, queue: str | None) -> dict[str, int]:
        """The last sequence each queue's consumer handed out (queues without one: absent)."""
        if queue is not None:
            return {queue: await delivered_seq(self.conn, self.jobs.stream, queue)}
        return {
            c.name: c.delivered_stream_seq
            for c in await consumer_facts(self.conn, self.jobs.stream)
            if c.filter_subject == self.ns.queue_filter(c.name, self.partition)
        }

    # -- queued ---------------------------------------------------------------------------

    async def _queued(
        self, queue: str | None, task: str | None, limit: int, cursor: int, newest: bool
    ) -> JobPage:
        delivered = await self._delivered(queue)
        reads = Reads()

        def waiting(msg: StoredMessage) -> bool:
            parsed = self.ns.parse_job_subject(msg.subject)
            return parsed is not None and msg.seq > delivered.get(parsed[0], 0)

        readers = [SubjectReader(self.jobs, f, reads, waiting) for f in self._filters(queue, task)]
        # Fair queues' jobs waiting for their turn, in their intake (not its moved markers).
        turns: list[SubjectReader] = []
        if self.partition == 0 and self.app.fair_queues and (queue is None or queue in self.app.fair_queues):
            turns.append(SubjectReader(self.jobs, self.ns.intake_filter(queue, task=task), reads, _unmoved))
        # One queue's handed-out jobs all lie at or below its delivered sequence: skipped whole
        # (not those waiting in an intake, stored before whatever its queue handed out).
        floor = delivered.get(queue, 0) if queue is not None else 0
        if newest:
            before = cursor or await self.jobs.last_seq() + 1
            sources = [r.backward(before, floor + 1, limit) for r in readers]
            sources += [r.backward(before, 1, limit) for r in turns]
        else:
            sources = [r.forward(max(cursor, floor)) for r in readers] + [r.forward(cursor) for r in turns]
        found = await take(sources, newest, limit)
        items = tuple(
            waiting_job(self.ns, msg, JobState.QUEUED)
            if self.ns.parse_intake_subject(msg.subject) is None
            else turn_job(self.ns, msg)
            for msg in found
        )
        return Page(items, _next(found, limit), reads.count)

    # -- running and retrying -------------------------------------------------------------

    async def _handed_out(
        self, state: HandedOut, queue: str | None, task: str | None, limit: int, cursor: int, newest: bool
    ) -> JobPage:
        delivered = {q: seq for q, seq in (await self._delivered(queue)).items() if seq > 0}
        reads = Reads()
        items: list[JobSummary] = []
        position = cursor
        # Running or retrying is known only once its record is read: chunks of what the page
        # still needs are read and sorted out until it is full or nothing is left.
        while len(items) < limit:
            need = limit - len(items)
            sources: list[AsyncGenerator[StoredMessage, None]] = []
            for q, last in sorted(delivered.items()):
                for subjects in self._filters(q, task):
                    reader = SubjectReader(self.jobs, subjects, reads)
                    if newest:
                        sources.append(reader.backward(min(position or last + 1, last + 1), 1, need))
                    else:
                        sources.append(reader.forward(position, ceiling=last))
            chunk = await take(sources, newest, need)
            items += await self._sort_out(chunk, state, reads)
            if len(chunk) < need:
                break
            position = chunk[-1].seq
        return Page(tuple(items), str(position) if len(items) == limit else None, reads.count)

    async def _sort_out(self, chunk: list[StoredMessage], state: HandedOut, reads: Reads) -> list[JobSummary]:
        """The jobs of ``chunk`` in ``state``, in the chunk's order.

        A job whose record says this very message waits out a retry's delay or a snooze is
        retrying while that delay runs. Once it is due, the server hands it out again when a
        worker asks for more: the worker that has it (running it, or holding it) says so, and
        when none does it is still retrying, due, not a job whose worker is gone."""
        found = await asyncio.gather(*(self.records.read(job_id_in(msg)) for msg in chunk))
        reads.count += len(chunk)
        now = time.time()
        jobs: list[JobSummary | None] = []
        asking: list[tuple[int, JobSummary, JobRecord | None]] = []
        for msg, entry in zip(chunk, found, strict=True):
            record = entry[1] if entry is not None and entry[1].seq == msg.seq else None
            job = waiting_job(self.ns, msg, JobState.RETRYING)
            if record is not None and record.state.resting and (record.next_attempt_at or 0.0) > now:
                jobs.append(retrying_job(job, record))
            else:
                jobs.append(None)
                if state != "retrying" or (record is not None and record.state.resting):
                    asking.append((len(jobs) - 1, job, record))
        held = await self._holders([(job, record) for _, job, record in asking])
        for (i, _, record), job in zip(asking, held, strict=True):
            if job.reason == UNHELD and record is not None and record.state.resting:
                job = retrying_job(dataclasses.replace(job, state=JobState.RETRYING, worker=None), record)
            jobs[i] = job
        listed = [job for job in jobs if job is not None]
        if state == "retrying":
            return [job for job in listed if job.state is JobState.RETRYING]
        if state == "handed_out":
            return [job for job in listed if job.state is not JobState.RETRYING]
        wanted = JobState.RUNNING if state == "running" else JobState.QUEUED
        return [job for job in listed if job.state is wanted]

    async def _holders(self, jobs: list[tuple[JobSummary, JobRecord | None]]) -> list[JobSummary]:
        """Jobs handed out with what the workers holding them say (one question each, at
        once): running, or reserved (queued, with the reason)."""
        answers = await asyncio.gather(
            *(
                gather(
                    self.conn,
                    self.ns.held_subject(job.id),
                    place_token(job.seq, self.partition).encode(),
                    wait=_HELD_WAIT,
                    linger=0,
                )
                for job, _ in jobs
            )
        )
        holders = [holder_said(answer) for answer in answers]
        names = await self._worker_ids() if any(h.get("worker") for h in holders) else {}
        out = []
        for (job, record), holder in zip(jobs, holders, strict=True):
            worker, started, attempt = holder.get("worker"), holder.get("started_at"), holder.get("attempt")
            state, reason = holder_state(holder)
            if not isinstance(attempt, int):
                attempt = record.attempts or None if record is not None else None
            out.append(
                dataclasses.replace(
                    job,
                    state=state,
                    attempts=attempt,
                    started_at=utc(started) if state is JobState.RUNNING else None,
                    worker=names.get(worker, worker) if isinstance(worker, str) else None,
                    progress=progress_said(holder)[0],
                    progress_message=progress_said(holder)[1],
                    reason=reason,
                )
            )
        return out

    async def _worker_ids(self) -> dict[str, str]:
        """Registry ids of the live workers by ``host:pid``, the name a worker holding a job
        gives; none when the registry cannot be read (the ``host:pid`` names stand)."""
        if self.conn.server_version < REGISTRY_SINCE:
            return {}
        with contextlib.suppress(StreamRequestError, ServerVersionError):
            return {f"{e.host}:{e.pid}": e.id for e in await live_workers(self.app, self.conn)}
        return {}

    # -- scheduled ------------------------------------------------------------------------

    async def _scheduled(
        self, queue: str | None, task: str | None, limit: int, cursor: _Due | None, newest: bool
    ) -> JobPage:
        reads = Reads()
        items: list[JobSummary] = []
        # Delayed jobs that fire while the page is read, and with a task those of others,
        # are passed over: more are listed until the page is full.
        while len(items) < limit:
            need = limit - len(items)
            dues = await self._dues(queue, cursor, need, newest, reads)
            stored = await asyncio.gather(*(self._delayed_message(due) for due in dues))
            reads.count += len(dues)
            for (due, q, job_id), msg in zip(dues, stored, strict=True):
                if msg is None or (task is not None and msg.headers.get(TASK) != task):
                    continue
                items.append(delayed_job(job_id, q, due, msg))
            if len(dues) < need:
                break
            cursor = dues[-1]
        last = f"{cursor[0]}.{cursor[1]}.{cursor[2]}" if cursor is not None and len(items) == limit else None
        return Page(tuple(items), last, reads.count)

    async def _dues(
        self, queue: str | None, cursor: _Due | None, need: int, newest: bool, reads: Reads
    ) -> list[_Due]:
        """The ``need`` delayed jobs next after ``cursor`` in due order (latest first when
        ``newest``), from their subjects: one server answer held at a time."""
        pick = heapq.nlargest if newest else heapq.nsmallest
        best: list[_Due] = []
        # Made schedules, and those enqueued that no worker has made a schedule yet.
        places = (
            (self.ns.schedules_stream, self.ns.delayed_filter(queue or "*")),
            (self.ns.stream, self.ns.later_filter(queue or "*")),
        )
        for stream, subjects in places:
            async for page in subject_pages(self.conn, stream, subjects):
                reads.count += 1
                dues = (due for subject in page if (due := self._due(subject)) is not None)
                if cursor is not None:
                    dues = (due for due in dues if (due < cursor if newest else due > cursor))
                best = pick(need, itertools.chain(best, dues))
        return sorted(set(best), reverse=newest)

    def _due(self, subject: str) -> _Due | None:
        parsed = self.ns.parse_delayed_subject(subject) or self.ns.parse_later_subject(subject)
        return None if parsed is None else (parsed[1], parsed[0], parsed[2])

    async def _delayed_message(self, due: _Due) -> StoredMessage | None:
        """The message of delayed job ``due``: its schedule, or while no worker has made
        one, the message it was enqueued as."""
        at, queue, job_id = due
        found = await self.schedules.last(self.ns.delayed_subject(queue, at, job_id))
        return found if found is not None else await self.jobs.last(self.ns.later_subject(queue, at, job_id))


def _next(found: list[StoredMessage], limit: int) -> str | None:
    return str(found[-1].seq) if len(found) == limit else None


def _due_cursor(after: str | int | None) -> _Due | None:
    """The cursor of a scheduled page: ``<due ms>.<queue>.<job id>``."""
    if after is None:
        return None
    parts = str(after).split(".")
    try:
        if len(parts) != 3 or not parts[0].isdigit():
            raise ConfigurationError("malformed")
        return int(parts[0]), validate_name("queue", parts[1]), parts[2]
    except ConfigurationError:
        raise ConfigurationError(
            f"not a cursor of scheduled jobs: {after!r} (<due ms>.<queue>.<job id>)"
        ) from None


def _unmoved(msg: StoredMessage) -> bool:
    """Whether ``msg`` in an intake is a job still waiting (not the marker of one moved)."""
    return MOVED not in msg.headers
