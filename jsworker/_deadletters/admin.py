"""Dead letters you can work with: list, inspect, replay and purge what the workers gave up on.

A dead letter is stored by the worker as the job's original body and headers plus
``Jsw-Dlq-*`` headers saying what went wrong (see :mod:`jsworker._deadletters.format`).
Replaying one re-enqueues that body on the job's original subject under the same job id, with
a fresh dedup key ``<job id>:replay:<dlq seq>``, then deletes the dead letter::

    async with DeadLetters(app) as dlq:
        for letter in await dlq.list(task="charge"):
            print(letter.seq, letter.job_id, letter.reason)
        await dlq.replay(task="charge")
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import time
from collections.abc import Iterable, Sequence
from contextlib import aclosing

from .._core.paging import Page, check_limit, seq_cursor
from .._core.serializers import decode_call
from .._core.view import AppView
from .._enqueue.calls import check_job_id
from .._enqueue.receipt import Job
from .._errors import ConfigurationError, SerializationError
from .._observability.logging import get_logger
from .._wire import headers as wire
from .._wire.names import validate_name
from ..jetstream.limits_stream import LimitsStream
from ..jetstream.pages import range_page
from ..jetstream.publish import NoStreamError, OutMessage, Publisher
from ..jetstream.session import OperatorSession
from .format import task_token
from .letter import DeadLetter, DeadLetterNotFound, DeadLetterNotReplayable, ReplayedJob, job_id_of

REPLAYED_FROM = "Jsw-Replayed-From"
"""Header of a replayed job: the sequence its dead letter had in the dead-letter stream."""

log = get_logger("jsworker.deadletters")

# Added to a job only while it is a dead letter; a replayed job is a job again.
_LETTER_ONLY = {wire.QUEUE.lower(), wire.ORIGINAL_SUBJECT.lower()}
# Dead letters replayed per round: their publishes are in flight together, then deleted.
_CHUNK = 100


class DeadLetters(OperatorSession[AppView]):
    """The dead letters of ``app``: list, get, replay, purge, count.

    Opens its own connection on first use, on the event loop it is used from; close it with
    :meth:`aclose` or use ``async with DeadLetters(app) as dlq:``. Connection failures raise
    :class:`~jsworker.ConnectError`; failed requests on the stream raise
    :class:`~jsworker.jetstream.limits_stream.LimitsStreamError`.
    """

    def __init__(self, app: AppView) -> None:
        super().__init__(app, "dlq")

    async def _stream(self) -> LimitsStream:
        return LimitsStream(await self.connection(), self.app.namespace.dlq_stream)

    def _filter(self, task: str | None = None, queue: str | None = None) -> str:
        """The DLQ subject covering ``task`` and ``queue`` (any, when None)."""
        q = validate_name("queue", queue) if queue is not None else "*"
        t = validate_name("task", task) if task is not None else "*"
        return self.app.namespace.dlq_subject(q, t)

    # -- reading --------------------------------------------------------------------------

    async def list(
        self,
        task: str | None = None,
        queue: str | None = None,
        limit: int | None = None,
        *,
        bodies: bool = False,
    ) -> builtins.list[DeadLetter]:
        """Dead letters, oldest first, of ``task`` and/or ``queue`` if given, at most ``limit``.

        Reads headers only (``body`` is None, ``size`` is known) unless ``bodies=True``: a
        listing never needs the payloads, which may be large. One pass of a throwaway consumer
        over the stream; the client needs ~0.2 ms per dead letter, so filter or limit big ones.
        """
        if limit is not None and limit <= 0:
            return []
        stream = await self._stream()
        out: builtins.list[DeadLetter] = []
        async with aclosing(stream.scan(self._filter(task, queue), bodies=bodies)) as messages:
            async for msg in messages:
                out.append(DeadLetter.from_stored(msg))
                if limit is not None and len(out) >= limit:
                    break
        return out

    async def page(
        self,
        task: str | None = None,
        queue: str | None = None,
        *,
        limit: int = 50,
        after: str | int | None = None,
        newest_first: bool = False,
    ) -> Page[DeadLetter]:
        """One page of dead letters (of ``task`` and/or ``queue`` if given), headers only,
        oldest first or newest first; ``after`` is the previous page's ``next_after`` (its
        last dead letter's sequence).

        Oldest first, a page is read through one consumer starting after the cursor (create,
        a fetch per 1,000, delete) and the server sends the ``limit`` headers it lists. Newest
        first, windows of sequences are read below the cursor the same way, one consumer
        each, doubling while they hold too few (see :mod:`jsworker.jetstream.pages`).
        """
        check_limit(limit)
        conn = await self.connection()
        stream, subject = self.app.namespace.dlq_stream, self._filter(task, queue)
        found = await range_page(conn, stream, subject, seq_cursor(after), limit, newest=newest_first)
        last = str(found.last) if found.last is not None else None
        return Page(tuple(map(DeadLetter.from_stored, found.messages)), last, found.reads)

    async def get(self, ref: int | str) -> DeadLetter:
        """The dead letter with sequence ``ref``, or the newest one of job id ``ref``, body loaded.

        A numeric string is a sequence first and a job id only when no dead letter has that
        sequence. Raises :class:`DeadLetterNotFound` when there is none.
        """
        return (await self._resolve([ref], None))[0]

    async def count(self, task: str | None = None, queue: str | None = None) -> int:
        """How many dead letters are stored (of ``task`` and/or ``queue`` if given)."""
        stream = await self._stream()
        if task is None and queue is None:
            return await stream.count()
        return await stream.count(self._filter(task, queue))

    async def _resolve(self, refs: Sequence[int | str], task: str | None) -> builtins.list[DeadLetter]:
        """Dead letters for ``refs`` in their order, each once; all found, or raises."""
        stream = await self._stream()
        refs = [ref.strip() if isinstance(ref, str) else ref for ref in refs]
        found: dict[int | str, DeadLetter] = {}
        for ref in refs:
            seq = _as_seq(ref)
            msg = await stream.get(seq) if seq is not None else None
            letter = DeadLetter.from_stored(msg) if msg is not None else None
            if letter is not None and (task is None or letter.task == task):
                found[ref] = letter
            elif isinstance(ref, int):
                raise DeadLetterNotFound(_missing(str(ref), task, "sequence"))
        job_ids = {str(ref): ref for ref in refs if ref not in found}
        if job_ids:
            # Job ids are not indexed by the server: one headers-only pass finds them all.
            newest: dict[str, int] = {}
            async with aclosing(stream.scan(self._filter(task), bodies=False)) as messages:
                async for msg in messages:
                    if (job_id := job_id_of(msg)) in job_ids:
                        newest[job_id] = msg.seq
            for job_id, ref in job_ids.items():
                msg = await stream.get(newest[job_id]) if job_id in newest else None
                if msg is None:
                    raise DeadLetterNotFound(_missing(job_id, task, "sequence or job id"))
                found[ref] = DeadLetter.from_stored(msg)
        return builtins.list({found[ref].seq: found[ref] for ref in refs}.values())

    # -- changing -------------------------------------------------------------------------

    async def replay(
        self,
        refs: Iterable[int | str] | None = None,
        *,
        task: str | None = None,
        all: bool = False,
    ) -> builtins.list[Job]:
        """Enqueue dead letters again, then remove them from the dead-letter stream.

        Selects ``refs`` (as for :meth:`get`; with ``task``, each must be of that task), else
        every dead letter of ``task``, else with ``all=True`` every one there is now. Each goes
        to its original subject with its body and job headers, ``Jsw-Job-Id`` = its job id,
        ``Nats-Msg-Id`` = ``<job id>:replay:<seq>`` (so replaying it twice inside the dedup
        window makes one job), ``Jsw-Enqueued-At`` = now, ``Jsw-Replayed-From`` = ``<seq>``,
        and starts at attempt 1; a dead letter is removed only after its job was acknowledged.
        Returns :class:`ReplayedJob` receipts, oldest first (in ``refs`` order for refs). Refs
        are all checked before any is replayed: :class:`DeadLetterNotFound` when one names
        nothing, :class:`DeadLetterNotReplayable` when one cannot be replayed (a body the worker
        cut to fit ``max_payload``; under ``task``/``all`` such letters are left in place with a
        warning). :class:`~jsworker.ConfigurationError` when nothing is selected.
        """
        if isinstance(refs, str | int):
            refs = [refs]
        ref_list = builtins.list(refs) if refs is not None else []
        if ref_list and all:
            raise ConfigurationError("replay either refs or all=True, not both")
        if not ref_list and task is None and not all:
            raise ConfigurationError("replay what? pass refs, task=... or all=True")
        if task is not None:
            validate_name("task", task)
        stream = await self._stream()
        if not ref_list:
            return await self._replay_scan(stream, self._filter(task))
        letters = await self._resolve(ref_list, task)
        limit = (await self.connection()).max_payload
        prepared = [(letter, self._prepare(letter, limit)) for letter in letters]  # raises first
        jobs: builtins.list[Job] = []
        for i in range(0, len(prepared), _CHUNK):
            chunk = prepared[i : i + _CHUNK]
            jobs += await self._publish_chunk(chunk)
            # Deleting is slow on a big stream (~10 ms each), but refs are few.
            await asyncio.gather(*(stream.delete(letter.seq) for letter, _ in chunk))
        log.info("dlq.replayed", count=len(jobs))
        return jobs

    async def replay_edited(self, ref: int | str, body: bytes) -> Job:
        """Replay one dead letter (``ref`` as for :meth:`get`) with ``body`` for its payload
        (arguments corrected, say), then remove it; as :meth:`replay` otherwise. ``body`` must
        decode as a job's arguments with the app's serializer, or nothing is stored
        (:class:`~jsworker.ConfigurationError`, saying why)."""
        try:
            decode_call(self.app.serializer, body)
        except SerializationError as exc:
            raise ConfigurationError(f"not a job's arguments: {exc}") from exc
        (letter,) = await self._resolve([ref], None)
        edited = dataclasses.replace(letter, body=body, original_size=None)
        msg = self._prepare(edited, (await self.connection()).max_payload)
        (job,) = await self._publish_chunk([(edited, msg)])
        await (await self._stream()).delete(letter.seq)
        log.info("dlq.replayed_edited", seq=letter.seq)
        return job

    async def _replay_scan(self, stream: LimitsStream, subject: str) -> builtins.list[Job]:
        """Replay every dead letter on ``subject`` there is now, oldest first, in chunks.

        Dead letters that cannot be replayed are left where they are, with a warning each.
        """
        # Only what is there now: a replayed job that fails again becomes a newer dead letter,
        # which must not be picked up by this same pass.
        stop = await stream.last_seq()
        limit = (await self.connection()).max_payload
        jobs: builtins.list[Job] = []
        chunk: builtins.list[tuple[DeadLetter, OutMessage]] = []
        skipped: builtins.list[int] = []

        async def flush() -> None:
            jobs.extend(await self._publish_chunk(chunk))
            if skipped:
                # A purge below a sequence would take the dead letters left behind with it.
                await asyncio.gather(*(stream.delete(letter.seq) for letter, _ in chunk))
            else:
                # The scan is in sequence order, so every dead letter on the subject below the
                # chunk's last one was replayed by now (or removed by someone else): one purge
                # removes them all, where deleting each costs a round trip and ~10 ms of server.
                await stream.purge(subject, before_seq=chunk[-1][0].seq + 1)
            chunk.clear()

        async with aclosing(stream.scan(subject, bodies=True, stop_seq=stop)) as messages:
            async for msg in messages:
                letter = DeadLetter.from_stored(msg)
                try:
                    chunk.append((letter, self._prepare(letter, limit)))
                except DeadLetterNotReplayable as exc:
                    if chunk:
                        await flush()  # while a purge cannot reach this one yet
                    skipped.append(letter.seq)
                    log.warning("dlq.not_replayed", dlq_seq=letter.seq, job_id=letter.job_id, why=str(exc))
                    continue
                if len(chunk) >= _CHUNK:
                    await flush()
        if chunk:
            await flush()
        log.info("dlq.replayed", subject=subject, count=len(jobs), skipped=len(skipped))
        return jobs

    async def _publish_chunk(self, chunk: builtins.list[tuple[DeadLetter, OutMessage]]) -> builtins.list[Job]:
        """Publish the jobs of ``chunk``; the caller removes the dead letters afterwards.

        Publish, then remove: a crash in between leaves a dead letter whose next replay carries
        the same Nats-Msg-Id, so the server drops it instead of running the job twice.
        """
        conn = await self.connection()
        publisher = Publisher(conn, retry_for=self.app.options.publish_timeout)
        msgs = [msg for _, msg in chunk]
        try:
            stored = await publisher.publish_many(msgs)
        except NoStreamError:
            # The job stream is gone (or never existed on this server): create it and go on.
            await self.app.provision_streams(conn)
            publisher.retry_no_stream = True
            stored = await publisher.publish_many(msgs)
        jobs: builtins.list[Job] = []
        for (d, _), r in zip(chunk, stored, strict=True):
            log.debug("dlq.replayed_one", dlq_seq=d.seq, job_id=d.job_id, seq=r.seq)
            jobs.append(ReplayedJob(d.job_id, d.task, d.queue, r.seq, r.duplicate, replayed_from=d.seq))
        return jobs

    def _prepare(self, letter: DeadLetter, max_payload: int) -> OutMessage:
        """The job message replaying ``letter``; raises :class:`DeadLetterNotReplayable`."""
        why = f"dead letter {letter.seq} (job {letter.job_id}) cannot be replayed"
        if letter.original_size is not None:
            raise DeadLetterNotReplayable(
                f"{why}: its body was cut from {letter.original_size} bytes to fit max_payload"
            )
        ns = self.app.namespace
        where = ns.parse_job_subject(letter.subject)
        try:
            if where is None:
                # Letters from before Jsw-Original-Subject existed, or with a hostile one.
                where = validate_name("queue", letter.queue), task_token(letter.task)
            # The job id becomes the subject's last token, so the replayed job can be found by it.
            job_id = check_job_id(letter.job_id)
            subject = ns.job_subject(*where, job_id, self.app.job_partition(where[0], job_id))
        except ConfigurationError as exc:
            raise DeadLetterNotReplayable(f"{why}: it names no job subject") from exc
        headers = {k: v for k, v in letter.headers.items() if k.lower() not in _LETTER_ONLY}
        headers.update(
            {
                wire.MSG_ID: f"{letter.job_id}:replay:{letter.seq}",
                wire.JOB_ID: letter.job_id,
                wire.ENQUEUED_AT: str(time.time_ns()),
                REPLAYED_FROM: str(letter.seq),
            }
        )
        msg = OutMessage(subject=subject, body=letter.body or b"", headers=headers)
        if msg.size > max_payload:
            raise DeadLetterNotReplayable(
                f"{why}: with its headers it is {msg.size} bytes, over max_payload ({max_payload})"
            )
        return msg

    async def delete(self, seq: int) -> bool:
        """Delete the dead letter with sequence ``seq`` for good; False when there was none."""
        if isinstance(seq, bool) or not isinstance(seq, int) or seq <= 0:
            raise ConfigurationError(f"not a dead letter's sequence: {seq!r}")
        deleted = await (await self._stream()).delete(seq)
        log.info("dlq.deleted", seq=seq, deleted=deleted)
        return deleted

    async def purge(self, task: str | None = None, queue: str | None = None) -> int:
        """Delete the dead letters of ``task`` and/or ``queue`` (all when neither); returns how many."""
        removed = await (await self._stream()).purge(self._filter(task, queue))
        log.info("dlq.purged", task=task, queue=queue, removed=removed)
        return removed


def _as_seq(ref: int | str) -> int | None:
    if isinstance(ref, bool):
        raise ConfigurationError(f"not a dead-letter reference: {ref!r}")
    if isinstance(ref, int):
        if ref <= 0:
            raise DeadLetterNotFound(f"no dead letter with sequence {ref}")
        return ref
    text = ref.strip()
    if not text:
        raise ConfigurationError("an empty dead-letter reference")
    return int(text) if text.isascii() and text.isdigit() and int(text) > 0 else None


def _missing(ref: str, task: str | None, what: str) -> str:
    of_task = f" of task {task!r}" if task is not None else ""
    return f"no dead letter{of_task} with {what} {ref!r}"
