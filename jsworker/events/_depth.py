"""Queue depth over time: samples of each queue's waiting, in-flight and delayed jobs, stored
with job events on (``App(events=True)``) in a stream of their own (``JSW_<APP>_DEPTH``,
``...depth.<queue>``), for the dashboard's chart.

Every worker reads its queues' figures from the server on an interval already (for its
metrics); once per :data:`SLOT` seconds it stores them as a sample whose ``Nats-Msg-Id``
names the queue and the slot, so that of a fleet's workers the server keeps one: a queue
costs one small message (headers only) per slot, whatever the number of workers. A chart reads
the samples of its window headers only, through one short-lived consumer.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._errors import EventsNotFound
from .._observability.logging import get_logger
from ..jetstream.history import stream_bounds
from ..jetstream.message import OutMessage, Stored
from ..jetstream.pipeline import store_each
from ..jetstream.span import Span

if TYPE_CHECKING:
    from .._core.queues import QueueStatus
    from .._wire.names import Namespace
    from ..jetstream.connection import Connection

log = get_logger("jsworker.events")

#: Seconds between two samples of a queue.
SLOT = 30.0
#: The most samples one chart reads (a week of 30-second slots of 8 queues is about 160,000).
LIMIT = 200_000
_WAITING, _IN_FLIGHT, _DELAYED = "Jsw-Waiting", "Jsw-In-Flight", "Jsw-Delayed"


def depth_message(ns: Namespace, status: QueueStatus, slot: int) -> OutMessage:
    """The sample of ``status`` (a queue's figures) for time slot ``slot``."""
    headers = {
        "Nats-Msg-Id": f"depth-{status.queue}-{slot}",
        _WAITING: str(status.pending),
        _IN_FLIGHT: str(status.in_flight),
        _DELAYED: str(status.delayed),
    }
    return OutMessage(ns.depth_subject(status.queue), b"", headers)


class DepthSampler:
    """Stores a sample of the queues' figures once per slot (see the module)."""

    def __init__(self, conn: Connection, ns: Namespace) -> None:
        self.conn, self.ns = conn, ns
        self._last_slot = -1

    async def sample(self, statuses: Iterable[QueueStatus], now: float | None = None) -> None:
        """Store ``statuses`` unless this slot's sample was stored already; a failure is let
        go (the next slot samples again)."""
        slot = math.floor((time.time() if now is None else now) / SLOT)
        if slot == self._last_slot:
            return
        self._last_slot = slot
        msgs = [depth_message(self.ns, status, slot) for status in statuses if status.has_consumer]
        answers = await store_each(self.conn, msgs)
        if not all(isinstance(answer, Stored) for answer in answers):
            log.debug("events.depth_not_stored", queues=len(msgs))


@dataclass(frozen=True, slots=True)
class DepthSeries:
    """The depth samples of a window: per queue and bucket (``bucket`` seconds, numbered from
    the epoch), the last sample's waiting and in-flight jobs; ``reads``: samples read;
    ``cut``: the window held more than a chart reads, which then starts at ``since``."""

    bucket: float
    since: float
    until: float
    samples: dict[str, dict[int, tuple[int, int]]] = field(default_factory=dict)
    reads: int = 0
    cut: bool = False

    def series(self, queue: str | None, first: int, count: int, index: int) -> list[float | None]:
        """For ``count`` buckets from bucket ``first``: ``queue``'s figure ``index`` (0:
        waiting, 1: in flight) in each, or every queue's together; None where no sample is."""
        queues = [queue] if queue is not None else list(self.samples)
        out: list[float | None] = []
        for n in range(first, first + count):
            found = [self.samples[q][n][index] for q in queues if n in self.samples.get(q, {})]
            out.append(float(sum(found)) if found else None)
        return out


async def read_depth(
    conn: Connection, ns: Namespace, *, window: float, bucket: float, limit: int = LIMIT
) -> DepthSeries:
    """The depth samples of the last ``window`` seconds in ``bucket``-second buckets;
    :class:`EventsNotFound` when the app has no events stream."""
    now = time.time()
    since = math.floor((now - window) / bucket) * bucket
    bounds = await stream_bounds(conn, ns.depth_stream)
    if bounds is None:
        raise EventsNotFound(f"no depth stream {ns.depth_stream}: the app never ran with App(events=True)")
    samples: dict[str, dict[int, tuple[int, int]]] = defaultdict(dict)
    reads, cut = 0, False
    while bounds.messages:
        async with Span(
            conn, ns.depth_stream, [ns.depth_subject()], start_time=since, headers_only=True
        ) as span:
            if span.pending > limit and since < now - bucket:
                # The newest part of the window that holds about ``limit`` samples, whole
                # buckets: what matters most is how the queues stand now.
                cut = True
                share = (now - since) * limit / span.pending
                since = math.floor((now - share) / bucket) * bucket + bucket
                continue
            async for msg in span.messages(bounds.last_seq):
                reads += 1
                try:
                    figures = (int(msg.headers[_WAITING]), int(msg.headers[_IN_FLIGHT]))
                except (KeyError, ValueError):
                    continue  # not a sample this version wrote
                if msg.stored_at is not None:
                    samples[msg.subject.rsplit(".", 1)[-1]][math.floor(msg.stored_at / bucket)] = figures
            break
    return DepthSeries(bucket, since, now, dict(samples), reads, cut)
