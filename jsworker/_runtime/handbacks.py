"""Jobs a stopping worker gives back unfinished, counted so that they keep their attempts.

The server counts every delivery, and a job's attempts are its deliveries. A worker that stops
(SIGTERM, the end of ``--grace``) gives back the jobs it holds, and each comes back with the
next delivery count through no fault of its own: a job of a task with ``max_retries=0`` would
be taken for one that kills its workers and dead-lettered without having run. So before it
gives jobs back, a worker adds one to each job's count of hand-backs, kept in the claims
stream under :meth:`~jsworker._wire.names.Namespace.handback_subject` (compare-and-set writes, so
two workers never lose a count). The count is read only when a delivery has reached its task's
limit of attempts, and the hand-backs are then not held against it: nothing on the common path.

A worker that forgets jobs it had pulled (it stood still past their ack wait, or lost its
connection) counts them too, as it forgets them. A worker that dies gives nothing back and
counts nothing: its jobs' next deliveries count, as they must for a job that kills its
workers. Servers without the claims stream (before 2.12) keep the plain count.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

import anyio

from .._errors import JsworkerError
from .._observability.logging import get_logger
from .._scheduling.claims import claim_of, marked
from .._scheduling.declare import DELAYED_SINCE
from ..jetstream.connection import Connection
from ..jetstream.delivery import Delivery
from ..jetstream.limits_stream import LimitsStream, StoredMessage
from ..jetstream.stored import SubjectMoved, write
from .execution import JobRun

if TYPE_CHECKING:
    from .._app import App

log = get_logger("jsworker.worker")

# Seconds a stopping worker spends counting before it gives the jobs back anyway.
_PATIENCE = 2.0
# Compare-and-set rounds for one count that other workers keep changing.
_ROUNDS = 3


class HandBackCounts:
    """Gives jobs back with their hand-backs counted, and reads those counts."""

    def __init__(self, app: App, conn: Connection) -> None:
        self._namespace = app.namespace
        self._conn = conn
        self._claims = LimitsStream(conn, app.namespace.claims_stream)
        self._enabled = conn.server_version >= DELAYED_SINCE
        self._counting: set[asyncio.Future[None]] = set()

    async def give_back(self, deliveries: Sequence[Delivery]) -> None:
        """Count each of ``deliveries`` as handed back, then give it back (``nak``) for
        another worker to take at once."""
        await self.count(deliveries)
        for delivery in deliveries:
            await delivery.nak()

    def count_soon(self, deliveries: Sequence[Delivery]) -> None:
        """:meth:`count` beside the caller, for deliveries a worker forgot rather than gave
        back (after a pause, or with its connection lost): the server hands each out again
        once its ack wait runs out, through no fault of its job's, so that delivery must not
        be taken for a crash either."""
        if self._enabled and deliveries:
            task = asyncio.ensure_future(self.count(deliveries))
            self._counting.add(task)
            task.add_done_callback(self._counting.discard)

    async def count(self, deliveries: Sequence[Delivery]) -> None:
        """Count each of ``deliveries`` as handed back (within a bounded time): the caller
        gives it back."""
        if self._enabled and deliveries:
            failed = len(deliveries)  # unless the counting ends within its patience
            with anyio.move_on_after(_PATIENCE):
                done = await asyncio.gather(*(self._count_one(d) for d in deliveries), return_exceptions=True)
                failed = sum(1 for result in done if isinstance(result, BaseException))
            if failed:
                # Given back all the same: those jobs' next deliveries count as attempts.
                log.warning("worker.handbacks_not_counted", jobs=failed)

    async def _count_one(self, delivery: Delivery) -> None:
        ns = self._namespace
        subject = ns.handback_subject(delivery.stream_seq, ns.partition_in(delivery.subject))
        for _ in range(_ROUNDS):
            found = await self._claims.last(subject)
            body = b"%d" % (_count(found) + 1)
            try:
                await write(self._conn, subject, body, marked({}), expect_last=found.seq if found else 0)
                return
            except SubjectMoved:
                continue  # another worker counted one meanwhile: count on top of it
        raise SubjectMoved(subject)

    async def read(self, job: JobRun) -> int:
        """Set and return ``job.handed_back``: how often stopping workers gave ``job`` back
        (0 when that cannot be read)."""
        if self._enabled and job.attempt > 1:
            try:
                subject = self._namespace.handback_subject(job.delivery.stream_seq, job.stream_partition)
                found = await self._claims.last(subject)
            except JsworkerError as exc:
                log.warning("job.handbacks_unread", error=str(exc), **job.log_fields())
                return 0
            # Never more than the deliveries before this one, whatever the stream holds.
            job.handed_back = min(_count(found), job.attempt - 1)
        return job.handed_back


def _count(found: StoredMessage | None) -> int:
    # A message no worker wrote (no claim mark) counts nothing.
    body = claim_of(found) or ""
    return int(body) if body.isdigit() else 0
