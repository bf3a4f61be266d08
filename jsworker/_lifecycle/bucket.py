"""The app's jobs bucket: one record a job id, kept ``result_ttl`` seconds.

A key-value bucket (stream ``KV_jsw_<app>_jobs``, keys ``$KV.jsw_<app>_jobs.<job id>``), so
``nats kv get jsw_<app>_jobs <job id>`` shows a record too. Each record carries its own
``Nats-TTL``, so tasks can keep their results for different times in one bucket.
"""

from __future__ import annotations

import math

from .._errors import SerializationError
from .._wire.names import Namespace
from ..jetstream.connection import Connection
from ..jetstream.limits_stream import LimitsStream
from ..jetstream.message import OutMessage, Stored
from ..jetstream.stored import write
from ..jetstream.topology import StreamSpec
from .state import JobRecord

TTL = "Nats-TTL"
#: Per-message TTLs, which the bucket needs, came with nats-server 2.11.
RECORDS_SINCE = (2, 11, 0)
#: Fast batch publishing, which lets a worker store many records for one answer, with 2.14.
BATCHED_SINCE = (2, 14, 0)


def jobs_bucket_spec(namespace: Namespace, replicas: int, *, batched: bool = False) -> StreamSpec:
    """The bucket's stream: the last record of each job, every record with its own TTL;
    ``batched`` lets workers store records in fast batches."""
    return StreamSpec(
        name=namespace.jobs_stream,
        subjects=(namespace.record_subject(),),
        work_queue=False,
        replicas=replicas,
        duplicate_window=60.0,
        max_msgs_per_subject=1,
        kv=True,
        batched=batched,
    )


def record_message(namespace: Namespace, job_id: str, record: JobRecord, ttl: float) -> OutMessage:
    """The message that stores ``record`` for ``job_id`` for ``ttl`` seconds (at least one)."""
    return OutMessage(namespace.record_subject(job_id), record.encode(), ttl_headers(ttl))


def ttl_headers(ttl: float) -> dict[str, str]:
    """The headers that keep a record ``ttl`` seconds (at least one)."""
    return {TTL: f"{max(1, math.ceil(ttl))}s"}


class Records:
    """Reads and compare-and-set writes of job records.

    A bucket that does not exist reads as holding no record, unless ``bucket_required``: then
    reads raise :class:`~jsworker.jetstream.limits_stream.StreamNotFoundError`.
    """

    def __init__(self, conn: Connection, namespace: Namespace, *, bucket_required: bool = False) -> None:
        self.conn = conn
        self.namespace = namespace
        self._stream = LimitsStream(conn, namespace.jobs_stream)
        self._bucket_required = bucket_required

    async def read(self, job_id: str) -> tuple[int, JobRecord] | None:
        """``(sequence, record)`` of ``job_id``, None when there is none (or it is unreadable)."""
        found = await self._stream.last(
            self.namespace.record_subject(job_id), stream_required=self._bucket_required
        )
        if found is None or not found.body:
            return None
        try:
            return found.seq, JobRecord.decode(found.body)
        except SerializationError:
            return None

    async def write(
        self, job_id: str, record: JobRecord, ttl: float, *, expect_last: int | None = None
    ) -> Stored:
        """Store ``record``; with ``expect_last`` only over that record (0: none), else
        :class:`~jsworker.jetstream.stored.SubjectMoved`."""
        msg = record_message(self.namespace, job_id, record, ttl)
        return await write(self.conn, msg.subject, msg.body, msg.headers, expect_last=expect_last)
