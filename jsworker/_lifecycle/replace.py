"""A job's stored message replaced by a copy of itself under the same job id: how a retry now
starts a retrying job early (:mod:`jsworker.admin`), and how a worker puts back a job its
queue's consumer will not hand out again (:mod:`.orphans`).

The copy is stored first, then the message deleted: a failure in between leaves the job twice
(it may run twice, as any job may), never not at all. The copy's dedup key names the message
it replaces, so two replacements of one message at once store one copy, and only the one whose
copy the server stored deletes the message: the other, told "duplicate", leaves both be. So
when that delete finds the message gone, it went another way (the job settled or was cancelled
meanwhile), and the copy is deleted again: it must not run.
"""

from __future__ import annotations

from collections.abc import Mapping

from .._wire import headers as wire
from .._wire.names import Namespace
from ..jetstream.connection import Connection
from ..jetstream.limits_stream import LimitsStream, StoredMessage
from ..jetstream.message import Stored
from ..jetstream.publish import OutMessage, Publisher


def job_copy(
    ns: Namespace, job_id: str, message: StoredMessage, why: str, headers: Mapping[str, str]
) -> OutMessage | None:
    """The job message that replaces ``message`` (job ``job_id``'s), with ``headers`` added;
    None when its subject names no job. ``why`` (a word) goes into the copy's dedup key."""
    where = ns.parse_job_subject(message.subject)
    if where is None:
        return None
    # The server's headers (the dedup key, a firing's) belong to the message replaced; the
    # copy is a plain job of the same id, as a replayed dead letter is.
    kept = {k: v for k, v in message.headers.items() if not k.lower().startswith("nats-")}
    kept.update({wire.MSG_ID: f"{job_id}:{why}:{message.seq}", wire.JOB_ID: job_id, **headers})
    return OutMessage(
        ns.job_subject(*where, job_id, ns.partition_in(message.subject)), message.body or b"", kept
    )


async def replace(
    conn: Connection, ns: Namespace, message: StoredMessage, copy: OutMessage, retry_for: float
) -> Stored | None:
    """Store ``copy`` in place of ``message`` (see the module); what the server said of the
    copy (a duplicate: another replacement's), or None when ``message`` was gone and the copy
    was deleted again."""
    jobs = LimitsStream(conn, ns.stream_of(message.subject))
    stored = await Publisher(conn, retry_for=retry_for).publish(copy)
    if stored.duplicate or await jobs.delete(message.seq):
        return stored
    await jobs.delete(stored.seq)
    return None
