"""Waiting for job results: one subscription per connection, a future per waiting call.

Every record a worker stores is also a message on ``$KV.jsw_<app>_jobs.<job id>``, so a plain
subscription sees it as it is stored: no polling, no consumer on the server per waiter. A
record stored before the subscription existed, or while the connection was down, is read
from the bucket instead: right after a waiter registers, and again after every reconnect.
The subscription can see a record before the stream has stored it (and before the waiter
registers: a fast job finishes while its enqueue is still returning), so the last finished
records nobody waited for are kept a while, for a waiter that comes right after.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from dataclasses import dataclass

from nats.aio.msg import Msg

from ..errors import SerializationError
from ..jetstream.connection import Connection
from ..naming import Namespace
from .bucket import Records
from .state import JobRecord

# Finished records seen with nobody waiting, kept for a waiter that registers just after.
_RECENT = 1024


@dataclass(eq=False, slots=True)
class _Waiting:
    seq: int  # the job message's sequence, 0 for any
    future: asyncio.Future[JobRecord]


class ResultWaiter:
    """Resolves waits for finished job records on one connection."""

    def __init__(self, conn: Connection, namespace: Namespace) -> None:
        self.conn = conn
        self.namespace = namespace
        self.records = Records(conn, namespace)
        self._waiting: dict[str, list[_Waiting]] = {}
        self._recent: OrderedDict[str, JobRecord] = OrderedDict()
        self._subscribed = False
        self._lock = asyncio.Lock()

    async def wait(self, job_id: str, seq: int, timeout: float | None) -> JobRecord:
        """The finished record of ``job_id`` (of the message at ``seq`` when not 0);
        ``TimeoutError`` after ``timeout`` seconds (None: no limit)."""
        await self._subscribe()
        waiting = _Waiting(seq, asyncio.get_running_loop().create_future())
        self._waiting.setdefault(job_id, []).append(waiting)
        try:
            seen = self._recent.get(job_id)
            if seen is not None:
                self._offer(job_id, seen)
            if not waiting.future.done():
                await self._read(job_id)
            return await asyncio.wait_for(asyncio.shield(waiting.future), timeout)
        finally:
            left = self._waiting.get(job_id)
            if left is not None:
                left.remove(waiting)
                if not left:
                    del self._waiting[job_id]

    async def _subscribe(self) -> None:
        if self._subscribed:
            return
        async with self._lock:
            if not self._subscribed:
                await self.conn.nc.subscribe(self.namespace.record_subject(), cb=self._on_record)
                # The subscription is sent before any read: a record stored after the read
                # then reaches it (the server handles one connection's messages in order).
                await self.conn.nc.flush()
                self.conn.on_reconnect(self._reread)
                self._subscribed = True

    async def _on_record(self, msg: Msg) -> None:
        job_id = msg.subject.rsplit(".", 1)[-1]
        # A message that is not a record jsworker wrote has nothing for a waiter.
        with contextlib.suppress(SerializationError):
            record = JobRecord.decode(msg.data)
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

    async def _reread(self) -> None:
        # Records stored while the connection was down reached no subscription.
        for job_id in list(self._waiting):
            await self._read(job_id)

    def _offer(self, job_id: str, record: JobRecord) -> None:
        if not record.state.finished:
            return
        for waiting in self._waiting.get(job_id, ()):
            if not waiting.future.done() and (waiting.seq == 0 or waiting.seq == record.seq):
                waiting.future.set_result(record)
