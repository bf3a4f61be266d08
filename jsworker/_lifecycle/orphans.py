"""Jobs a queue's consumer will never hand out again, put back.

A work-queue stream deletes a job's message once the queue's consumer is told the job is done,
and the consumer's ack floor (every message at or below it is done) moves past it. A message of
the queue still stored at or below the floor is therefore one the consumer counts as done that
nobody acknowledged: it is never delivered again, and its job would never run. nats-server
(2.15 among others: nats-server#6469 and #7680 are of the kind) leaves such messages behind when
a consumer's leader changes (its stream's leader killed) while jobs wait out a ``nak`` delay (a
retry's backoff, a limit's hold-back): the new leader lost their pending redeliveries and moved
the floor past them.

Every worker looks at the queues it pulls (:class:`OrphanWatch`). A look reads the consumer:
one cheap request. Reading the stream for messages at or below the floor costs the server more
the more jobs wait (it goes through every waiting job's subject), so a watch reads it only for
a while after a disturbance that can leave such messages: its first look, a new leader of the
consumer, a reconnect of the worker. A message found on two reads in a row (one acknowledged an
instant ago is still stored until the server has deleted it) is replaced by a copy under the
same job id (:mod:`.replace`), which the consumer delivers as a new message. Workers that look
at once store one copy.

The relays' consumers (delayed jobs into schedules, fired jobs into their queues, see
:mod:`jsworker._scheduling.relay`) wait out ``nak`` delays too, when a move fails during the
same failover. What they passed is handed out again by starting the consumer again from the
first such message (nats-server 2.14+): a move made twice stores nothing twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from .._observability.logging import get_logger
from .._wire.headers import job_id_of
from ..jetstream.connection import Connection
from ..jetstream.inspect import consumer_place, stored_up_to
from ..jetstream.limits_stream import StoredMessage
from ..jetstream.rewind import rewind
from .replace import job_copy, replace

if TYPE_CHECKING:
    from .._core.view import AppView

log = get_logger("jsworker.worker")

#: Header of a job put back: the stream sequence of the message it replaced.
RESTORED_FROM = "Jsw-Restored-From"
#: Looks that read the stream after a disturbance: the floor moves past a message the new
#: leader lost only as later jobs are acknowledged, within moments on a busy queue.
SCAN_LOOKS = 6
# The most messages one read takes per queue and partition: a look stays a few requests, and
# the next one takes the rest.
_MOST = 100

_Key = tuple[str, str]  # (stream, consumer)


class OrphanWatch:
    """Looks for the messages of one worker's queues and relays that their consumers no longer
    hand out, and puts back those found twice (see the module). :meth:`reconnected` is to be
    told of each reconnect of ``conn``."""

    def __init__(self, app: AppView, conn: Connection) -> None:
        self.app = app
        self.conn = conn
        # Per consumer: its leader term at the last look, the looks left that read the stream,
        # and the sequences found at or below the floor by the last read.
        self._terms: dict[_Key, tuple[str | None, datetime | None]] = {}
        self._reads: dict[_Key, int] = {}
        self._seen: dict[_Key, set[int]] = {}

    async def reconnected(self) -> None:
        """The worker's connection came back: the server it reaches may have restarted."""
        for key in self._terms:
            self._reads[key] = SCAN_LOOKS

    async def look(self, queue: str, partition: int) -> list[str]:
        """Look once at ``queue`` in ``partition``: the ids of the jobs put back."""
        ns = self.app.namespace
        stream = ns.partition_stream(partition)
        read = await self._read(stream, queue, ns.queue_filter(queue, partition))
        if read is None:
            return []
        found, before = read
        # A message of no job subject cannot be put back: it is left, and not read for again.
        copies = {}
        for message in found:
            job_id = job_id_of(message.headers, message.seq)
            copy = job_copy(ns, job_id, message, "restore", {RESTORED_FROM: str(message.seq)})
            if copy is not None:
                copies[message.seq] = (message, job_id, copy)
        # Read again next time while any is left (those put back now are gone by then).
        self._seen[stream, queue] = set(copies)
        restored: list[str] = []
        for seq, (message, job_id, copy) in copies.items():
            if seq not in before:
                continue
            stored = await replace(self.conn, ns, message, copy, self.app.options.publish_timeout)
            if stored is not None and not stored.duplicate:  # a duplicate: another worker's
                restored.append(job_id)
                log.warning(
                    "job.restored",
                    job_id=job_id,
                    queue=queue,
                    seq=stored.seq,
                    replaced=message.seq,
                    reason="its queue's consumer had passed it without an acknowledgement",
                )
        return restored

    async def look_relay(self, stream: str, consumer: str, subjects: str) -> list[int]:
        """Look once at the consumer of a relay (a move of delayed or fired jobs, which may
        be made twice): messages found passed on two reads are handed out again by starting
        the consumer again from the first of them. Their sequences."""
        read = await self._read(stream, consumer, subjects)
        if read is None:
            return []
        found, before = read
        self._seen[stream, consumer] = {message.seq for message in found}
        passed = [message.seq for message in found if message.seq in before]
        if not passed:
            return []
        # Copies, as for a queue, would not do: a move takes its job's dedup key and unique-key
        # checks from the headers its producer wrote, which a copy must change. The consumer's
        # pending moves are handed out again too, and made again to no effect (each write
        # carries its dedup key).
        await rewind(self.conn, stream, consumer, passed[0])
        log.warning(
            "relay.rewound",
            consumer=consumer,
            messages=len(passed),
            first=passed[0],
            reason="its consumer had passed them without an acknowledgement",
        )
        return passed

    async def _read(
        self, stream: str, consumer: str, subjects: str
    ) -> tuple[list[StoredMessage], set[int]] | None:
        """The messages on ``subjects`` stored at or below ``consumer``'s ack floor, and the
        sequences the last read found; None when this look reads no messages (or there is no
        consumer)."""
        key = (stream, consumer)
        place = await consumer_place(self.conn, stream, consumer)
        if place is None:
            return None
        if self._terms.get(key, ()) != place.term:  # a first look, or a new leader
            self._reads[key] = SCAN_LOOKS
        self._terms[key] = place.term
        before = self._seen.pop(key, set())
        if self._reads.get(key, 0) <= 0 and not before:
            return None
        self._reads[key] = max(0, self._reads.get(key, 0) - 1)
        return await stored_up_to(self.conn, stream, subjects, place.ack_floor, _MOST), before
