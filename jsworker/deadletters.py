"""Dead letters you can work with: list, inspect, replay and purge what the workers gave up on.

A dead letter is stored by the worker as the job's original body and headers plus
``Jsw-Dlq-*`` headers saying what went wrong (see :mod:`jsworker.runtime.deadletter`).
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
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

from . import wire
from .errors import ConfigurationError, JsworkerError, SerializationError
from .jetstream.connection import Connection
from .jetstream.dlq import DlqStream, StoredMessage
from .jetstream.publish import NoStreamError, OutMessage, Publisher, Stored
from .job import Job
from .naming import validate_name
from .observability.logging import get_logger
from .runtime.deadletter import task_token

if TYPE_CHECKING:
    from .app import App

__all__ = ["REPLAYED_FROM", "DeadLetter", "DeadLetterNotFound", "DeadLetters", "ReplayedJob"]

REPLAYED_FROM = "Jsw-Replayed-From"
"""Header of a replayed job: the sequence its dead letter had in the dead-letter stream."""

log = get_logger("jsworker.deadletters")

_DLQ_PREFIX = "jsw-dlq-"
_SERVER_PREFIX = "nats-"
# Added to a job only while it is a dead letter; a replayed job is a job again.
_LETTER_ONLY = {wire.QUEUE.lower(), wire.ORIGINAL_SUBJECT.lower()}
# Dead letters replayed per round: their publishes are in flight together, then deleted.
_CHUNK = 100


class DeadLetterNotFound(JsworkerError):
    """No dead letter has that sequence or job id (or it was replayed or purged already)."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead letter, as stored in the app's dead-letter stream.

    ``seq`` is its sequence in that stream; ``subject`` is the job's original subject;
    ``headers`` are the job's own headers (everything but ``Jsw-Dlq-*`` and the server's
    ``Nats-*``); ``failed_at`` is unix seconds. ``body`` is the job's payload byte for byte,
    or None when it was not loaded (:meth:`DeadLetters.list` reads headers only unless asked);
    ``size`` is its length either way. ``attempts`` is 0 when the worker did not record it.
    """

    seq: int
    job_id: str
    task: str
    queue: str
    attempts: int
    reason: str
    error_type: str | None
    error: str | None
    traceback: str | None
    failed_at: float | None
    subject: str
    headers: Mapping[str, str]
    body: bytes | None
    size: int

    @classmethod
    def from_stored(cls, msg: StoredMessage) -> DeadLetter:
        """Read a dead letter out of its stored message, tolerating missing headers."""
        h = msg.headers
        # Subject fallback: jsw.<app>.dlq.<queue>.<task>, for letters missing their headers.
        parts = msg.subject.split(".")
        queue = h.get(wire.QUEUE) or (parts[3] if len(parts) == 5 else "")
        task = h.get(wire.TASK) or (parts[4] if len(parts) == 5 else "")
        return cls(
            seq=msg.seq,
            job_id=_job_id(msg),
            task=task,
            queue=queue,
            attempts=_int(h.get(wire.DLQ_ATTEMPTS)) or 0,
            reason=h.get(wire.DLQ_REASON, ""),
            error_type=h.get(wire.DLQ_ERROR_TYPE),
            error=h.get(wire.DLQ_ERROR),
            traceback=_traceback(h.get(wire.DLQ_TRACEBACK)),
            failed_at=_failed_at(h.get(wire.DLQ_AT), msg.stored_at),
            subject=h.get(wire.ORIGINAL_SUBJECT, ""),
            headers={k: v for k, v in h.items() if not k.lower().startswith((_DLQ_PREFIX, _SERVER_PREFIX))},
            body=msg.body,
            size=msg.size,
        )

    def payload(self) -> Any:
        """The body decoded as JSON; raises :class:`SerializationError` when it is not JSON."""
        if self.body is None:
            raise SerializationError(
                f"the body of dead letter {self.seq} was not loaded; use DeadLetters.get({self.seq})"
            )
        try:
            return json.loads(self.body)
        except (UnicodeDecodeError, ValueError) as exc:
            raise SerializationError(f"the body of dead letter {self.seq} is not JSON: {exc}") from exc

    def pretty_payload(self) -> str:
        """The body for people: indented JSON when it is JSON, else the ``repr`` of the bytes."""
        if self.body is None:
            return "(not loaded)"
        try:
            return json.dumps(self.payload(), indent=2, ensure_ascii=False)
        except SerializationError:
            return repr(self.body)

    @property
    def failed_at_iso(self) -> str | None:
        """``failed_at`` as ISO 8601 in UTC, to the second (``2025-01-31T12:00:00Z``)."""
        if self.failed_at is None:
            return None
        return datetime.fromtimestamp(self.failed_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class ReplayedJob(Job):
    """Receipt of a replayed dead letter: a :class:`Job`, plus the dead letter's sequence."""

    replayed_from: int = 0


class DeadLetters:
    """The dead letters of ``app``: list, get, replay, purge, count.

    Opens its own connection on first use, on the event loop it is used from; close it with
    :meth:`aclose` or use ``async with DeadLetters(app) as dlq:``. Connection failures raise
    :class:`~jsworker.ConnectError`; failed requests on the stream raise
    :class:`~jsworker.jetstream.dlq.DlqStreamError`.
    """

    def __init__(self, app: App) -> None:
        self.app = app
        self._conn: Connection | None = None
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> DeadLetters:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection (it is opened again on next use)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def _connection(self) -> Connection:
        async with self._lock:
            if self._conn is None or self._conn.is_closed:
                self._conn = await Connection.open(self.app.connect_options("dlq"))
            return self._conn

    async def _stream(self) -> DlqStream:
        return DlqStream(await self._connection(), self.app.namespace.dlq_stream)

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
        found: dict[int | str, DeadLetter] = {}
        for ref in refs:
            seq = _as_seq(ref)
            msg = await stream.get(seq) if seq is not None else None
            letter = DeadLetter.from_stored(msg) if msg is not None else None
            if letter is not None and (task is None or letter.task == task):
                found[ref] = letter
            elif isinstance(ref, int):
                raise DeadLetterNotFound(_missing(str(ref), task, "sequence"))
        job_ids = {str(ref).strip(): ref for ref in refs if ref not in found}
        if job_ids:
            # Job ids are not indexed by the server: one headers-only pass finds them all.
            newest: dict[str, int] = {}
            async with aclosing(stream.scan(self._filter(task), bodies=False)) as messages:
                async for msg in messages:
                    if (job_id := _job_id(msg)) in job_ids:
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
        Returns :class:`ReplayedJob` receipts, oldest first (in ``refs`` order for refs). Raises
        :class:`DeadLetterNotFound`, before replaying any, when a ref names nothing, and
        :class:`~jsworker.ConfigurationError` when nothing is selected.
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
        if ref_list:
            letters = await self._resolve(ref_list, task)
            jobs: builtins.list[Job] = []
            for i in range(0, len(letters), _CHUNK):
                chunk = letters[i : i + _CHUNK]
                jobs += await self._replay_chunk(chunk)
                # Deleting is slow on a big stream (~10 ms each), but refs are few.
                await asyncio.gather(*(stream.delete(letter.seq) for letter in chunk))
            log.info("dlq.replayed", count=len(jobs))
            return jobs
        return await self._replay_scan(stream, self._filter(task))

    async def _replay_scan(self, stream: DlqStream, subject: str) -> builtins.list[Job]:
        """Replay every dead letter on ``subject``, in chunks, oldest first."""
        # Only what is there now: a replayed job that fails again becomes a newer dead letter,
        # which must not be picked up by this same pass.
        stop = await stream.last_seq()
        jobs: builtins.list[Job] = []
        chunk: builtins.list[DeadLetter] = []

        async def flush() -> None:
            jobs.extend(await self._replay_chunk(chunk))
            # The scan is in sequence order, so every dead letter on the subject below the
            # chunk's last one was replayed by now (or deleted by someone else): one purge
            # removes them all, where a delete per message costs a server round trip and more.
            await stream.purge(subject, before_seq=chunk[-1].seq + 1)
            chunk.clear()

        async with aclosing(stream.scan(subject, bodies=True, stop_seq=stop)) as messages:
            async for msg in messages:
                chunk.append(DeadLetter.from_stored(msg))
                if len(chunk) >= _CHUNK:
                    await flush()
        if chunk:
            await flush()
        log.info("dlq.replayed", subject=subject, count=len(jobs))
        return jobs

    async def _replay_chunk(self, letters: builtins.list[DeadLetter]) -> builtins.list[Job]:
        """Publish jobs for ``letters``; the caller removes the dead letters afterwards.

        Publish, then remove: a crash in between leaves a dead letter whose next replay carries
        the same Nats-Msg-Id, so the server drops it instead of running the job twice.
        """
        stored = await self._publish([self._job_message(letter) for letter in letters])
        for letter, receipt in zip(letters, stored, strict=True):
            log.debug("dlq.replayed_one", dlq_seq=letter.seq, job_id=letter.job_id, seq=receipt.seq)
        return [
            ReplayedJob(d.job_id, d.task, d.queue, r.seq, r.duplicate, replayed_from=d.seq)
            for d, r in zip(letters, stored, strict=True)
        ]

    async def _publish(self, msgs: builtins.list[OutMessage]) -> builtins.list[Stored]:
        conn = await self._connection()
        publisher = Publisher(conn, retry_for=self.app.publish_timeout)
        try:
            return await publisher.publish_many(msgs)
        except NoStreamError:
            # The job stream is gone (or never existed on this server): create it and go on.
            await self.app.provision_streams(conn)
            publisher.retry_no_stream = True
            return await publisher.publish_many(msgs)

    def _job_message(self, letter: DeadLetter) -> OutMessage:
        ns = self.app.namespace
        subject = letter.subject
        if ns.parse_job_subject(subject) is None:
            # Letters from before Jsw-Original-Subject existed, or with a hostile one.
            try:
                subject = ns.job_subject(validate_name("queue", letter.queue), task_token(letter.task))
            except ConfigurationError as exc:
                raise JsworkerError(f"dead letter {letter.seq} has no job subject to replay to") from exc
        headers = {k: v for k, v in letter.headers.items() if k.lower() not in _LETTER_ONLY}
        headers.update(
            {
                wire.MSG_ID: f"{letter.job_id}:replay:{letter.seq}",
                wire.JOB_ID: letter.job_id,
                wire.ENQUEUED_AT: str(time.time_ns()),
                REPLAYED_FROM: str(letter.seq),
            }
        )
        return OutMessage(subject=subject, body=letter.body or b"", headers=headers)

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


def _job_id(msg: StoredMessage) -> str:
    """The job id of a stored dead letter; its dedup key is ``<job id>:<attempt>``."""
    return (
        msg.headers.get(wire.JOB_ID)
        or msg.headers.get(wire.MSG_ID, "").rpartition(":")[0]
        or f"dlq-{msg.seq}"
    )


def _missing(ref: str, task: str | None, what: str) -> str:
    of_task = f" of task {task!r}" if task is not None else ""
    return f"no dead letter{of_task} with {what} {ref!r}"


def _int(raw: str | None) -> int | None:
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _traceback(raw: str | None) -> str | None:
    if raw is None:
        return None
    try:
        text = json.loads(raw)
    except ValueError:
        return raw  # not what the worker writes, but still worth showing as it is
    return text if isinstance(text, str) else raw


def _failed_at(raw: str | None, stored_at: float | None) -> float | None:
    ns = _int(raw)
    return ns / 1e9 if ns is not None else stored_at
