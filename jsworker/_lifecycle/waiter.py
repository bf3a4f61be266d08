"""Waiting for job results: one subscription per connection, a future per waiting call.

Every record a worker stores is also a message on ``$KV.jsw_<app>_jobs.<job id>``, so a plain
subscription sees it as it is stored: no polling, no consumer on the server per waiter. A
record stored before the subscription existed, or while the connection was down, is read
from the bucket instead: right after a waiter registers, and again after every reconnect.
The subscription can see a record before the stream has stored it (and before the waiter
registers: a fast job finishes while its enqueue is still returning), so the last finished
records nobody waited for are kept a while, for a waiter that comes right after. The other
way round, a record published just before the subscription started reaches no subscription,
and the server may store it only after the first read looked (a read does not queue behind
the messages the stream has still to store): every job still waited for is read again a few
times in the seconds after the subscription starts or comes back (:data:`_SETTLE`).

A wait outlives the server. A read that fails for a reason that passes (no answer, the
connection down, no stream leader during a restart or an election) is owed, not raised: one
task per connection makes the owed reads again, with a growing pause, and at once after a
reconnect, until each is made or nobody waits for that job any more. Only the caller's
timeout, a finished record, or an error that will not pass (permission denied, the
connection closed) ends a wait. A jobs bucket that does not exist reads as "not yet" until
the timeout, whose ``TimeoutError`` then says so. A waiter whose reads succeed pays for none
of this.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from dataclasses import dataclass

from .._errors import SerializationError
from .._wire.names import Namespace
from ..jetstream.connection import Connection
from ..jetstream.limits_stream import LimitsStreamError, StreamNotFoundError
from ..jetstream.listen import listen
from .bucket import Records
from .state import JobRecord

# Finished records seen with nobody waiting, kept for a waiter that registers just after.
_RECENT = 1024
# Pauses between rounds of owed reads that failed: short at first (a 503 during an election
# passes in a second or two), at most this long (bounds the wait after the server is back
# when no reconnect tells us, as after an election).
_RETRY_FIRST = 0.05
_RETRY_MAX = 2.0
# Seconds after the subscription starts (or comes back after a reconnect) at which every job
# still waited for is read again: by then a record published just before it is stored. A
# connection's waiter pays these reads in its first seconds only.
_SETTLE = (0.25, 1.0, 5.0)
# Owed reads made at once. A round stops at the first batch with a failure: what failed one
# read (no leader, no answer) fails the others too, so a server that is struggling gets at
# most this many reads per pause however many callers wait.
_READS_AT_ONCE = 32


@dataclass(eq=False, slots=True)
class _Waiting:
    seq: int  # the job message's sequence, 0 for any
    future: asyncio.Future[JobRecord]


@dataclass(eq=False, slots=True)
class _Owed:
    """A read of a job's record still to be made; ``failure`` is why the last try failed.

    Compared by identity: a reconnect replaces it, so a read that was in flight across the
    reconnect (its answer may predate records stored meanwhile) does not settle the new one.
    """

    failure: Exception | None = None


class ResultWaiter:
    """Resolves waits for finished job records on one connection."""

    def __init__(self, conn: Connection, namespace: Namespace) -> None:
        self.conn = conn
        self.namespace = namespace
        # A missing bucket raises, so that a wait that times out can say why.
        self.records = Records(conn, namespace, bucket_required=True)
        self._waiting: dict[str, list[_Waiting]] = {}
        self._recent: OrderedDict[str, JobRecord] = OrderedDict()
        self._subscribed = False
        self._lock = asyncio.Lock()
        self._owed: dict[str, _Owed] = {}
        self._retrying: asyncio.Task[None] | None = None
        self._settling: asyncio.Task[None] | None = None
        self._reconnected = asyncio.Event()

    async def wait(self, job_id: str, seq: int, timeout: float | None) -> JobRecord:
        """The finished record of ``job_id`` (of the message at ``seq`` when not 0);
        ``TimeoutError`` after ``timeout`` seconds (None: no limit).

        Disconnects, server restarts and leader elections in between do not end the wait;
        an error that trying again cannot mend (permission denied) does.
        """
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        await self._subscribe()
        waiting = _Waiting(seq, loop.create_future())
        self._waiting.setdefault(job_id, []).append(waiting)
        try:
            seen = self._recent.get(job_id)
            if seen is not None:
                self._offer(job_id, seen)
            if not waiting.future.done():
                await self._first_read(job_id)
            remaining = None if deadline is None else deadline - loop.time()
            try:
                return await asyncio.wait_for(asyncio.shield(waiting.future), remaining)
            except TimeoutError:
                if waiting.future.done():
                    raise  # the wait's own outcome, not its timeout
                raise self._timed_out(job_id, timeout) from self._why_unread(job_id)
        finally:
            self._leave(job_id, waiting)

    async def _subscribe(self) -> None:
        if self._subscribed:
            return
        async with self._lock:
            if not self._subscribed:
                await listen(self.conn, self.namespace.record_subject(), self._on_record)
                # The subscription is sent before any read: a record stored after the read
                # then reaches it (the server handles one connection's messages in order). A
                # flush that fails (the connection is down) loses nothing: on reconnect the
                # client sends its subscriptions before anything else.
                await self.conn.flush()
                self.conn.on_reconnect(self._reread)
                self._subscribed = True
                self._settle()

    async def _on_record(self, subject: str, data: bytes) -> None:
        job_id = subject.rsplit(".", 1)[-1]
        # A message that is not a record jsworker wrote has nothing for a waiter.
        with contextlib.suppress(SerializationError):
            record = JobRecord.decode(data)
            if job_id in self._waiting:
                self._offer(job_id, record)
            elif record.state.finished:
                self._recent[job_id] = record
                self._recent.move_to_end(job_id)
                if len(self._recent) > _RECENT:
                    self._recent.popitem(last=False)

    async def _read(self, job_id: str) -> None:
        found = await self.records.read(job_id)
        if found is not None:
            self._offer(job_id, found[1])

    async def _first_read(self, job_id: str) -> None:
        """Read the record once; a failure that may pass leaves the read owed."""
        try:
            await self._read(job_id)
        except LimitsStreamError as exc:
            if not self._passes(exc):
                raise
            self._owe(job_id, exc)

    def _passes(self, exc: LimitsStreamError) -> bool:
        """Whether reading again may succeed after ``exc``: no answer, no leader, the
        connection down (but not closed), or no bucket yet (no worker has made it)."""
        if self.conn.is_closed:
            return False  # nothing reconnects a closed connection
        return exc.transient or isinstance(exc, StreamNotFoundError)

    def _owe(self, job_id: str, failure: Exception | None = None) -> None:
        self._owed[job_id] = _Owed(failure)
        if self._retrying is None or self._retrying.done():
            self._retrying = asyncio.get_running_loop().create_task(self._retry())

    async def _reread(self) -> None:
        # Records stored while the connection was down reached no subscription: every
        # waiting job's record is read again. Not here and now: this runs inside the client's
        # reconnect, which must neither wait on reads nor fail with them (the other reconnect
        # listeners come after it). The retry task makes them, and tries again those that fail.
        for job_id in self._waiting:
            previous = self._owed.get(job_id)
            self._owe(job_id, previous.failure if previous is not None else None)
        self._reconnected.set()
        self._settle()

    def _settle(self) -> None:
        """Read every waited-for job again at the :data:`_SETTLE` times from now."""
        if self._settling is not None:
            self._settling.cancel()
        self._settling = asyncio.get_running_loop().create_task(self._read_again_soon())

    async def _read_again_soon(self) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        for after in _SETTLE:
            await asyncio.sleep(started + after - loop.time())
            if self.conn.is_closed:
                return
            for job_id in list(self._waiting):
                if job_id not in self._owed:
                    self._owe(job_id)

    async def _retry(self) -> None:
        """Make the owed reads until none is left: while connected, in rounds with a growing
        pause between failed ones; while not, wait for the reconnect."""
        pause = _RETRY_FIRST
        while self._owed:
            if self.conn.is_closed:
                self._fail_all(
                    LimitsStreamError(
                        f"cannot read job records of {self.namespace.jobs_stream}: connection closed"
                    )
                )
                return
            if self.conn.is_connected:
                self._reconnected.clear()
                if await self._read_owed():
                    pause = _RETRY_FIRST
                    continue
            try:
                await asyncio.wait_for(self._reconnected.wait(), pause)
            except TimeoutError:
                pause = min(2 * pause, _RETRY_MAX)
            else:
                # Back: read at once, and soon again if the server is still settling.
                self._reconnected.clear()
                pause = _RETRY_FIRST

    async def _read_owed(self) -> bool:
        """One round of owed reads, a batch at a time; False after a batch in which a read
        failed (and may succeed later), True when every read was made."""
        owed = list(self._owed.items())
        for start in range(0, len(owed), _READS_AT_ONCE):
            batch = owed[start : start + _READS_AT_ONCE]
            made = await asyncio.gather(*(self._read_owed_one(job_id, mark) for job_id, mark in batch))
            if not all(made):
                return False
        return True

    async def _read_owed_one(self, job_id: str, mark: _Owed) -> bool:
        if self._owed.get(job_id) is not mark:
            return True  # owed anew since (a reconnect): that read comes in a later round
        if job_id not in self._waiting:
            del self._owed[job_id]  # nobody waits any more
            return True
        try:
            await self._read(job_id)
        except LimitsStreamError as exc:
            if self._passes(exc):
                mark.failure = exc
                return False
            self._fail(job_id, exc)
        except Exception as exc:
            # Raised in a task nobody awaits, it would be lost: the waiters get it instead.
            self._fail(job_id, exc)
        else:
            if self._owed.get(job_id) is mark:
                del self._owed[job_id]
        return True

    def _fail(self, job_id: str, exc: Exception) -> None:
        """End the waits for ``job_id`` with ``exc`` (an error that trying again cannot mend)."""
        self._owed.pop(job_id, None)
        for waiting in self._waiting.get(job_id, ()):
            if not waiting.future.done():
                waiting.future.set_exception(exc)

    def _fail_all(self, exc: Exception) -> None:
        for job_id in list(self._owed):
            self._fail(job_id, exc)

    def _why_unread(self, job_id: str) -> Exception | None:
        owed = self._owed.get(job_id)
        return owed.failure if owed is not None else None

    def _timed_out(self, job_id: str, timeout: float | None) -> TimeoutError:
        text = f"job {job_id} did not finish within {timeout or 0:g} s"
        failure = self._why_unread(job_id)
        if isinstance(failure, StreamNotFoundError):
            text += (
                f": the jobs bucket {self.namespace.jobs_stream} does not exist (no worker of the app "
                "has run on this server, or the bucket was deleted)"
            )
        elif failure is not None:
            text += f"; its record could not be read since: {failure}"
        return TimeoutError(text)

    def _leave(self, job_id: str, waiting: _Waiting) -> None:
        left = self._waiting.get(job_id)
        if left is not None:
            left.remove(waiting)
            if not left:
                del self._waiting[job_id]
                self._owed.pop(job_id, None)
        if waiting.future.done() and not waiting.future.cancelled():
            # An error set after the caller stopped waiting (its timeout) is not worth a
            # "never retrieved" warning.
            waiting.future.exception()

    def _offer(self, job_id: str, record: JobRecord) -> None:
        if not record.state.finished:
            return
        for waiting in self._waiting.get(job_id, ()):
            if not waiting.future.done() and (waiting.seq == 0 or waiting.seq == record.seq):
                waiting.future.set_result(record)
