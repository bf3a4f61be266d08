"""Publishing job events: one fire-and-forget message per event, never failing the caller."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._wire.headers import ENQUEUED_AT, JOB_ID, MSG_ID, SCHEDULED_FOR, TASK, caller_headers
from ._schema import MAX_REASON, EventKind, JobEvent, encode_event

if TYPE_CHECKING:
    from .._observability.metrics import Metrics
    from .._wire.names import Namespace
    from ..jetstream.connection import Connection


_name: tuple[int, str] = (0, "")


def process_name() -> str:
    """``host:pid``: which process an event came from (looked up again after a fork)."""
    global _name
    pid = os.getpid()
    if _name[0] != pid:
        _name = (pid, f"{socket.gethostname()}:{pid}")
    return _name[1]


class EventEmitter:
    """Publishes :class:`JobEvent` records of one app over one connection.

    Sending is a core publish with no acknowledgement: the cost on the job's path is one JSON
    encoding and a write into the client's buffer. An event that cannot be sent (connection
    down and the client's buffer full) is counted in ``jsworker_events_dropped_total`` and
    otherwise ignored: events describe jobs, they never decide their fate.
    """

    def __init__(self, conn: Connection, namespace: Namespace, metrics: Metrics) -> None:
        self._conn = conn
        self._ns = namespace
        self._dropped = metrics.events_dropped
        self.source = process_name()

    async def emit(
        self, kind: EventKind, queue: str, task: str, job_id: str, *, ts: float | None = None, **fields: Any
    ) -> None:
        """Publish one event; ``fields`` are the optional :class:`JobEvent` fields."""
        reason = fields.get("reason")
        if reason is not None and len(reason) > MAX_REASON:
            fields["reason"] = reason[: MAX_REASON - 1] + "…"
        event = JobEvent(
            event=kind,
            job_id=job_id,
            task=task,
            queue=queue,
            ts=time.time() if ts is None else ts,
            worker=self.source,
            **fields,
        )
        subject = self._ns.event_subject(queue, task, kind)
        if not await self._conn.publish_nowait(subject, encode_event(event)):
            self._dropped.inc()

    async def enqueued(self, queue: str, headers: Mapping[str, str]) -> None:
        """Publish ``enqueued`` for the job a producer stored with ``headers``, or
        ``scheduled`` when it is a delayed job (``delay``: seconds until it is due)."""
        at = int(headers[ENQUEUED_AT]) / 1e9
        due = headers.get(SCHEDULED_FOR)
        # A unique job carries its id in Jsw-Job-Id: the server's check of its subject, not a
        # dedup key, keeps it one.
        job_id = headers.get(MSG_ID) or headers[JOB_ID]
        # The caller's own headers travel with the job's first event: a tenant or a trace id
        # to group events by.
        own = caller_headers(headers) or None
        if due is None:
            await self.emit("enqueued", queue, headers[TASK], job_id, ts=at, enqueued_at=at, headers=own)
        else:
            await self.emit(
                "scheduled", queue, headers[TASK], job_id, ts=at, enqueued_at=at,
                delay=max(0.0, int(due) / 1000 - at), headers=own,
            )  # fmt: skip


async def emit_enqueued(
    namespace: Namespace, metrics: Metrics, conn: Connection, queue: str, headers: list[Mapping[str, str]]
) -> None:
    """Publish ``enqueued`` (or ``scheduled``) for each job one enqueue stored with these
    ``headers``: the app gives this to its producer (see :data:`jsworker._enqueue.producer.EnqueuedHook`)."""
    events = EventEmitter(conn, namespace, metrics)
    for each in headers:
        await events.enqueued(queue, each)
