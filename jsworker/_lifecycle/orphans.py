"""Jobs a queue's consumer will never hand out again, put back.

A work-queue stream deletes a job's message once the queue's consumer is told the job is done,
and the consumer's ack floor (every message at or below it is done) moves past it. A message of
the queue still stored at or below the floor is therefore one the consumer counts as done that
nobody acknowledged: it is never delivered again, and its job would never run. nats-server
(2.15 among others: nats-server#6469 and #7680 are of the kind) leaves such messages behind when
a job stream's leader is killed while jobs wait out a ``nak`` delay (a retry's backoff, a limit's
hold-back): the new leader lost their pending redeliveries and moved the floor past them.

Every worker looks at the queues it pulls (:class:`OrphanWatch`); a message it finds at or below
the floor on two looks in a row is replaced by a copy under the same job id (:mod:`.replace`),
which the consumer delivers as a new message. Two looks: a message acknowledged an instant ago
is still stored until the server has deleted it. Workers that look at once store one copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._observability.logging import get_logger
from .._wire.headers import job_id_of
from ..jetstream.connection import Connection
from ..jetstream.inspect import below_ack_floor
from .replace import job_copy, replace

if TYPE_CHECKING:
    from .._core.view import AppView

log = get_logger("jsworker.worker")

#: Header of a job put back: the stream sequence of the message it replaced.
RESTORED_FROM = "Jsw-Restored-From"
# The most messages one look reads per queue and partition: a look stays a few requests, and
# the next one takes the rest.
_MOST = 100


class OrphanWatch:
    """Looks for the messages of one worker's queues that their consumers no longer hand out,
    and puts back those seen twice (see the module)."""

    def __init__(self, app: AppView, conn: Connection) -> None:
        self.app = app
        self.conn = conn
        # (queue, partition) -> the stream sequences found at or below the floor last time.
        self._seen: dict[tuple[str, int], set[int]] = {}

    async def look(self, queue: str, partition: int) -> list[str]:
        """Look once at ``queue`` in ``partition``: the ids of the jobs put back."""
        ns = self.app.namespace
        found = await below_ack_floor(
            self.conn, ns.partition_stream(partition), queue, ns.queue_filter(queue, partition), _MOST
        )
        before = self._seen.get((queue, partition), set())
        # Those put back now are gone at the next look; any left (a failure) are tried again.
        self._seen[queue, partition] = {m.seq for m in found}
        restored: list[str] = []
        for message in found:
            if message.seq not in before:
                continue
            job_id = job_id_of(message.headers, message.seq)
            copy = job_copy(ns, job_id, message, "restore", {RESTORED_FROM: str(message.seq)})
            if copy is None:
                continue  # no job subject: nothing it could be put back as
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
