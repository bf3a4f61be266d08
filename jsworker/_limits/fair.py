"""Fair queues (``app.queue(name, fair=True)``): the partitions of a queue's jobs take turns,
so that one partition's backlog never holds up another's jobs for long.

A job for a fair queue is not published to the queue but to its **intake**,
``jsw.<app>.in.<queue>.<task>.<job id>`` in the job stream, with its partition (a hash of its
``partition_key``, or its task's name) in a header. One worker of the queue at a time, the
holder of the queue's **mover lease** (``jsw.<app>.lease.<queue>.fair.0``, renewed like a
partition lease, taken over by another worker within :data:`~.partitions.LEASE_TTL` of its
holder's death), moves jobs from the intake into the queue:

* it follows the intake (headers only, through a consumer of its own) and keeps the sequence
  of each job waiting there in memory, by partition, in the order they were stored (about
  100 bytes a job); it moves nothing before it has read what the intake held when it took
  the lease (some 30,000 jobs a second);
* it keeps at most :data:`READY` jobs waiting in the queue: whenever fewer wait, it moves
  the next jobs **round-robin**, one from each partition that has any in turn, a partition
  seen for the first time joining the end of the turn;
* a round reads the jobs it moves, then stores in one atomic batch, for each, its copy in the
  queue and, over the job in the intake, a marker that rolls it up, expecting the job to be
  the last message on its subject: a job cancelled (deleted) after it was read makes the
  batch fail as a whole, and the round moves its jobs one by one instead; a job is moved
  once whatever fails (servers 2.12+). A marker expires a second later.

**The bound.** A job that is first of its partition in the intake starts after at most
``READY + B + P`` other jobs of the queue have started, where ``B`` is what the queue's
workers hold pulled and not yet started (a fair queue's pull does not grow past
``--max-messages``, by default the concurrency up to 128) and ``P`` the partitions ahead of
it in the turn. Within a partition, jobs move in the order they were stored.

What it costs: a read a job and, a round, one atomic batch and one ``CONSUMER.INFO``, on one
worker (700 to 1,000 jobs a second on two cores, ``bench/limits.py``); a queue that is not
fair costs nothing. Delayed jobs and periodic ticks for a fair queue join the queue itself
when they are due; so do retries (the queue's consumer keeps them). A job whose explicit id
is held by a job still running waits in the intake until the id is free.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Mapping

import anyio

from .._errors import JsworkerError
from .._observability.logging import get_logger
from .._wire.headers import EXPECTED_LAST_SUBJECT_SEQ, JOB_ID, MOVED, MSG_ID, MSG_TTL, PARTITION
from .._wire.names import Namespace
from ..jetstream.atomic import BatchConflict, publish_atomic
from ..jetstream.connection import Connection
from ..jetstream.inspect import waiting_count
from ..jetstream.limits_stream import LimitsStream, StoredMessage
from ..jetstream.message import OutMessage
from ..jetstream.span import follow_headers
from .partitions import LEASE_TTL, Lease, release_lease, renew_lease, take_lease

log = get_logger("jsworker.flow")

#: The most jobs a fair queue keeps waiting in the queue itself (moved, not handed out yet).
READY = 20
# How often the mover looks at the queue while it is full, and a standing-by worker at the lease.
_LOOK = 0.02
_STAND_BY = LEASE_TTL / 3
# The headers a move keeps of the server's own: everything else with the prefix is left out,
# so that a move never does more than store a plain job (no schedule, rollup or counter).
_SERVER_PREFIX = "nats-"
_KEPT = frozenset({EXPECTED_LAST_SUBJECT_SEQ.lower()})
# A marker stands for a moved job until the job's own message is deleted, right after the move,
# and is deleted with it. One a dying mover left behind goes by itself after this: long after
# another mover took the lease, read the intake and found it behind its job.
_MARKER_TTL = "10m"


#: A job waiting its turn: its partition, its sequence in the intake, its subject there.
_Job = tuple[str, int, str]


class Turns:
    """The jobs waiting in an intake, by partition, and whose turn is next."""

    def __init__(self) -> None:
        self._waiting: dict[str, deque[tuple[int, str]]] = {}
        self._turn: deque[str] = deque()
        #: Jobs waiting, in every partition's line.
        self.jobs = 0

    @property
    def partitions(self) -> int:
        """Partitions with jobs waiting."""
        return len(self._waiting)

    def add(self, partition: str, seq: int, subject: str) -> None:
        """A job stored at ``seq`` on ``subject`` in ``partition``'s line (last in it)."""
        self._line(partition, next_turn=False).append((seq, subject))
        self.jobs += 1

    def take(self, most: int) -> list[_Job]:
        """Up to ``most`` jobs, one from each partition in turn: ``(partition, seq, subject)``."""
        out: list[_Job] = []
        while len(out) < most and self._turn:
            partition = self._turn.popleft()
            line = self._waiting[partition]
            seq, subject = line.popleft()
            out.append((partition, seq, subject))
            if line:
                self._turn.append(partition)
            else:
                del self._waiting[partition]
        self.jobs -= len(out)
        return out

    def put_back(self, partition: str, seq: int, subject: str) -> None:
        """A job taken that could not move yet: first of its line again (a partition whose
        line had emptied has the next turn)."""
        self._line(partition, next_turn=True).appendleft((seq, subject))
        self.jobs += 1

    def _line(self, partition: str, next_turn: bool) -> deque[tuple[int, str]]:
        """``partition``'s line; a new one gets the last turn, or the next."""
        line = self._waiting.get(partition)
        if line is None:
            line = self._waiting[partition] = deque()
            if next_turn:
                self._turn.appendleft(partition)
            else:
                self._turn.append(partition)
        return line


class FairMover:
    """Moves the jobs of one fair queue from its intake into the queue, partitions taking
    turns, while its worker holds the queue's mover lease."""

    def __init__(
        self, conn: Connection, namespace: Namespace, queue: str, report: Callable[[int, int], None]
    ) -> None:
        """``report(jobs, partitions)`` is told what waits in the intake as the mover knows it
        (0, 0 while it does not hold the lease)."""
        self.conn, self.namespace, self.queue, self._report = conn, namespace, queue, report
        self._jobs = LimitsStream(conn, namespace.stream)
        self._leases = LimitsStream(conn, namespace.leases_stream)
        self._lease_subject = f"jsw.{namespace.app}.lease.{queue}.fair.0"
        #: ``(job, marker)`` sequences of moved jobs whose deletion got no answer: tried again
        #: before the next move, by this mover or, after a stop, when it holds the lease again.
        self._left_behind: list[tuple[int, int]] = []

    async def run(self) -> None:
        """Stand by for the mover lease, then move jobs for as long as it is held."""
        while True:
            lease = await self._take()
            if lease is None:
                await asyncio.sleep(_STAND_BY)
                continue
            log.info("fair.mover_started", queue=self.queue)
            try:
                await self._hold(lease)
            except JsworkerError as exc:
                # The server could not be read or written for a while: the lease goes back
                # and is taken again (by this worker or another) once the server answers.
                log.warning("fair.mover_stopped", queue=self.queue, error=str(exc))
            finally:
                self._report(0, 0)
                # Given back even when the worker stops: a standing-by one takes over at once.
                with anyio.CancelScope(shield=True), anyio.move_on_after(_STAND_BY):
                    await release_lease(self.conn, lease)

    async def _take(self) -> Lease | None:
        try:
            return await take_lease(self._leases, self._lease_subject)
        except JsworkerError as exc:
            log.warning("fair.lease_unreadable", queue=self.queue, error=str(exc))
            return None

    async def _hold(self, lease: Lease) -> None:
        turns, arrived, caught_up = Turns(), asyncio.Event(), asyncio.Event()
        follow = asyncio.create_task(
            self._follow(turns, arrived, caught_up), name=f"jsworker-fair-{self.queue}"
        )
        try:
            renew_at = time.monotonic() + LEASE_TTL / 3
            while not follow.done():
                if time.monotonic() >= renew_at:
                    if not await renew_lease(self.conn, lease):
                        return  # another worker moves this queue's jobs now
                    renew_at = time.monotonic() + LEASE_TTL / 3
                if not caught_up.is_set():
                    # Every partition waiting when the lease was taken gets its turn from the
                    # first round on: nothing moves before the whole intake is known.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(caught_up.wait(), LEASE_TTL / 3)
                    continue
                if self._left_behind:
                    moved, self._left_behind = self._left_behind, []
                    await self._delete_moved(moved)
                self._report(turns.jobs, turns.partitions)
                arrived.clear()  # before the look: a job stored from here on wakes the wait
                room = READY - await waiting_count(self.conn, self.namespace.stream, self.queue)
                batch = turns.take(room) if room > 0 else []
                if batch and await self._move_all(turns, batch):
                    continue
                if batch or room <= 0:
                    # Nothing could move, or the queue is full: its workers take what waits.
                    await asyncio.sleep(_LOOK)
                    continue
                with contextlib.suppress(TimeoutError):  # the intake is empty: wait for a job
                    await asyncio.wait_for(arrived.wait(), LEASE_TTL / 3)
            follow.result()  # the intake could not be followed: said by the supervisor
        finally:
            follow.cancel()

    async def _follow(self, turns: Turns, arrived: asyncio.Event, caught_up: asyncio.Event) -> None:
        ns = self.namespace
        backlog = await self._jobs.count(ns.intake_filter(self.queue))
        if not backlog:
            caught_up.set()
        async for msg in follow_headers(
            self.conn, ns.stream, f"fair-{self.queue}", ns.intake_filter(self.queue)
        ):
            earlier = not caught_up.is_set()  # stored before this mover began
            backlog -= msg is not None
            if msg is None or backlog <= 0:
                caught_up.set()  # read all of it (or what is left of it: some were deleted)
            if msg is None:
                continue
            if MOVED in msg.headers:
                # The marker of a job moved already. One found while catching up may be left
                # from a mover that stopped between the job's deletion and its own.
                if earlier:
                    await self._delete_stale_marker(msg)
                continue
            turns.add(msg.headers.get(PARTITION, ""), msg.seq, msg.subject)
            arrived.set()

    async def _move_all(self, turns: Turns, batch: list[_Job]) -> bool:
        """Move ``batch`` in one atomic batch (one by one when that is refused); True when
        any job left the intake."""
        try:
            found = await asyncio.gather(*(self._jobs.get(seq) for _, seq, _ in batch))
        except JsworkerError as exc:
            log.warning("fair.read_failed", queue=self.queue, error=str(exc))
            _put_back(turns, batch)
            return False
        # A job no longer there was cancelled: it is done with.
        waiting = [(job, msg) for job, msg in zip(batch, found, strict=True) if msg is not None]
        if not waiting:
            return True
        try:
            moves = [out for job, msg in waiting for out in self._move(job, msg)]
            stored = await publish_atomic(self.conn, moves)
            await self._delete_moved(await self._markers(waiting, stored.seq))
            return True
        except BatchConflict:
            # A job cancelled since it was read, or an id taken: the batch as a whole is
            # refused, each job on its own is not.
            return await self._move_each(turns, waiting) or len(waiting) < len(batch)
        except JsworkerError as exc:
            log.warning("fair.move_failed", queue=self.queue, error=str(exc))
            _put_back(turns, [job for job, _ in waiting])
            return False

    async def _move_each(self, turns: Turns, waiting: list[tuple[_Job, StoredMessage]]) -> bool:
        """Move each of ``waiting`` on its own, a partition's in order up to the first that
        cannot move yet (its explicit id is taken: it and those behind it go back, first in
        line); True when any moved or was found gone."""
        blocked: set[str] = set()
        back: list[_Job] = []
        progress = False
        for job, msg in waiting:
            partition, seq, _ = job
            if partition in blocked:
                back.append(job)
                continue
            try:
                stored = await publish_atomic(self.conn, self._move(job, msg))
                await self._delete_moved([(seq, stored.seq)])
                progress = True
                continue
            except BatchConflict:
                gone = await self._jobs.get(seq) is None or await self._moved_before(job)
            except JsworkerError as exc:
                log.warning("fair.move_failed", queue=self.queue, seq=seq, error=str(exc))
                gone = False
            if gone:
                progress = True
            else:
                blocked.add(partition)
                back.append(job)
        _put_back(turns, back)
        return progress

    async def _markers(self, waiting: list[tuple[_Job, StoredMessage]], last: int) -> list[tuple[int, int]]:
        """``(job, marker)`` sequences of the jobs a batch moved, ``last`` the sequence of its
        last message. A batch is stored in one piece, so each marker's sequence follows from
        the last: taken so once the batch's first marker is found where that puts it (a
        delete by sequence removes whatever is there, and a wrong one would remove another
        job), else each marker is read from its subject. (Markers, not the copies, are
        looked at: a worker may have run and removed a copy already.)"""
        first = last - 2 * len(waiting) + 2
        try:
            found = await self._jobs.get(first)
        except JsworkerError:
            found = None
        if found is not None and found.subject == waiting[0][0][2] and MOVED in found.headers:
            return [(job[1], first + 2 * i) for i, (job, _) in enumerate(waiting)]
        log.warning("fair.batch_not_contiguous", queue=self.queue, last=last, jobs=len(waiting))
        markers: list[tuple[int, int]] = []
        for job, _ in waiting:
            marker = await self._jobs.last(job[2])
            if marker is not None and MOVED in marker.headers:
                markers.append((job[1], marker.seq))
        return markers

    def _move(self, job: _Job, msg: StoredMessage) -> list[OutMessage]:
        """The two messages that move one job: its copy in the queue, and a marker stored
        behind the job in the intake only if the job is still the last message there, so
        that it moves once (the marker expires by itself)."""
        _, seq, subject = job
        copy = OutMessage(self.namespace.moved_subject(subject), msg.body or b"", _kept(msg))
        marker = {EXPECTED_LAST_SUBJECT_SEQ: str(seq), MOVED: "1", MSG_TTL: _MARKER_TTL}
        return [copy, OutMessage(subject, b"", marker)]

    async def _delete_moved(self, moved: list[tuple[int, int]]) -> None:
        """Delete what is left in the intake of jobs that moved: ``(job, marker)`` sequences.
        The job stream honours no rollup, so the marker cannot replace the job; it stands for
        the move until the job is gone, and goes once it is (a marker left stored would keep
        the intake's readers from ever being cleaned up). What gets no answer is tried again
        before the next move; a job left behind by a mover that stopped is found moved by its
        marker the next time it comes up (:meth:`_moved_before`), a marker alone when the next
        mover catches up (:meth:`_delete_stale_marker`)."""

        async def one(job: int, marker: int) -> None:
            try:
                await self._jobs.delete(job)
                await self._jobs.delete(marker)  # only once the job is gone: else it could move again
            except JsworkerError as exc:
                self._left_behind.append((job, marker))
                log.warning("fair.delete_failed", queue=self.queue, error=str(exc))

        await asyncio.gather(*(one(job, marker) for job, marker in moved))

    async def _delete_stale_marker(self, marker: StoredMessage) -> None:
        """Delete ``marker`` if the job it stands behind is gone: a marker must not outlive
        its job, as the intake's reader would never be cleaned up."""
        job = marker.headers.get(EXPECTED_LAST_SUBJECT_SEQ, "")
        try:
            if job.isdigit() and await self._jobs.get(int(job)) is None:
                await self._jobs.delete(marker.seq)
        except JsworkerError as exc:
            log.warning("fair.delete_failed", queue=self.queue, error=str(exc))

    async def _moved_before(self, job: _Job) -> bool:
        """Whether ``job`` moved already (a marker stands behind it): what is left of it goes."""
        _, seq, subject = job
        last = await self._jobs.last(subject)
        if last is None or last.seq == seq or MOVED not in last.headers:
            return False
        await self._delete_moved([(seq, last.seq)])
        return True


def _put_back(turns: Turns, jobs: list[_Job]) -> None:
    """Give ``jobs`` back their places, first in their lines, in their order."""
    for job in reversed(jobs):
        turns.put_back(*job)


def _kept(msg: StoredMessage) -> Mapping[str, str]:
    """The headers a moved job keeps: the job's own and its id expectation; its dedup key,
    which the server would take for the job's own first publish, becomes its job id."""
    kept = {
        k: v for k, v in msg.headers.items() if not k.lower().startswith(_SERVER_PREFIX) or k.lower() in _KEPT
    }
    if MSG_ID in msg.headers:
        kept.setdefault(JOB_ID, msg.headers[MSG_ID])
    return kept
