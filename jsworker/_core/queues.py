"""What every queue of an app looks like on the server right now (``jsworker status``).

All numbers are the server's; nothing is estimated client-side. Per refresh this costs one
``STREAM.INFO`` on each of the two streams (per-subject counts), one more on the job stream for
the delayed jobs (a subject each: its answer grows with the number waiting, about 60 bytes a
job), one ``CONSUMER.LIST`` page per 256 consumers, and one ``STREAM.MSG.GET`` per queue that
has a pending job (its oldest one). Counting the live workers (``workers=True``) adds one read
of the worker registry: a throwaway consumer and its messages, one a worker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from .._errors import TopologyError
from .._registry.entries import REGISTRY_SINCE, live_workers
from ..jetstream.api import StreamRequestError
from ..jetstream.connection import Connection
from ..jetstream.inspect import ConsumerFacts, StreamFacts, consumer_facts, first_stored_times, stream_facts

if TYPE_CHECKING:
    from .view import AppView


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """One queue of an app as the server sees it.

    - ``pending``: jobs stored and not yet handed to any worker (the consumer's
      ``num_pending``; without a consumer, every stored job of the queue). The server adds
      a job to its consumer's count a moment after acking the enqueue, off its own queue of
      signals: a status read right after an enqueue may not count it yet.
    - ``in_flight``: jobs handed to a worker and not yet acked or terminated (``num_ack_pending``).
      This includes jobs waiting out a retry backoff: a ``nak`` with a delay keeps the job
      assigned on the server until it is redelivered.
    - ``redelivered``: of ``in_flight``, jobs delivered more than once (retries, or jobs whose
      worker died) (``num_redelivered``).
    - ``dead_letters``: dead letters of the queue still kept in the dead-letter stream.
    - ``waiting_pulls``: pull requests outstanding on the server (``num_waiting``). The server
      does not tell how many workers are attached; an idle worker always keeps at least one
      pull request open and a request goes away when its worker disconnects, so
      ``waiting_pulls > 0`` means some live worker has room for more jobs, and 0 with
      ``pending > 0`` means no worker is taking jobs (none running, or all of them full).
    - ``oldest_pending_age``: seconds since the server stored the oldest ``pending`` job (not
      counting in-flight ones), measured on the server's clock; None when nothing is pending.
    - ``has_consumer``: whether the queue's durable consumer exists (created by workers).
    - ``delayed``: delayed jobs of the queue waiting on the server for their due time (not
      counted in ``pending`` until they fire).
    - ``next_due_in``: seconds until the queue's next delayed job is due (server clock; 0 or
      less: due, the server fires it within moments); None when none waits.
    - ``max_running``: the most jobs of the queue the server lets run at once across all
      workers (its consumer's ``max_ack_pending``, set by ``app.queue(..., max_running=)``);
      None for a queue that sets none (only the app's ``max_ack_pending`` bounds it) or has
      no consumer.
    - ``priority``: the queue's priority among those a worker serves (``app.queue``).
    - ``workers``: live worker processes pulling from the queue, from the worker registry;
      None when it was not read (or the server is too old to keep it).
    - ``paused``: its consumer is paused on the server (``Admin.pause_queue``): it hands out
      nothing until resumed, and jobs wait.
    - ``delivered``: deliveries its consumer has made since it was created, redeliveries
      included (a counter: two readings apart give the rate at which jobs start).
    - ``overrides``: its limits changed at run time (``Admin.set_queue_limits``), as stored:
      ``max_running`` (``"0"``: none of its own) and ``rate_limit`` (``"50/s"``, ``"none"``);
      a limit not in it is the code's.
    """

    queue: str
    pending: int = 0
    in_flight: int = 0
    redelivered: int = 0
    dead_letters: int = 0
    waiting_pulls: int = 0
    oldest_pending_age: float | None = None
    has_consumer: bool = False
    delayed: int = 0
    next_due_in: float | None = None
    max_running: int | None = None
    priority: int = 0
    workers: int | None = None
    paused: bool = False
    delivered: int = 0
    overrides: dict[str, str] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: counts as ints, the age in seconds (or None)."""
        return asdict(self)


def _per_queue(facts: StreamFacts, parse: Callable[[str], tuple[str, str] | None]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for subject, count in (facts.subjects or {}).items():
        parsed = parse(subject)
        if parsed is not None:
            totals[parsed[0]] = totals.get(parsed[0], 0) + count
    return totals


async def queue_status(
    app: AppView, conn: Connection | None = None, *, workers: bool = False
) -> list[QueueStatus]:
    """The status of every queue of ``app``, sorted by name; with ``workers``, the live
    workers of each queue too (off by default: every worker reads these figures every few
    seconds, and each of them reading every other's registry entry would cost a fleet the
    square of its size).

    The queues are those with a task, those with a jsworker consumer on the job stream (a
    consumer named ``<queue>`` filtering ``jsw.<app>.q.<queue>.>``), those with delayed
    jobs or dead letters stored, and those a live worker pulls from (with ``workers``). Counts
    come from the consumers; only a declared queue that no worker has served yet (no consumer)
    has its job subjects counted, since every waiting job has a subject of its own. A stream
    that does not exist yet (the app never ran) reads as empty. Without ``conn`` a connection
    is opened for the call and closed after it (:class:`~jsworker.ConnectError` if none can be).
    """
    if conn is None:
        own = await Connection.open(app.connect_options("operator", "status"))
        try:
            return await queue_status(app, own, workers=workers)
        finally:
            await own.close()
    ns = app.namespace
    partitions = range(app.partition_count)
    dlq, enqueued, scheduled, serving, consumers = await asyncio.gather(
        stream_facts(conn, ns.dlq_stream, ns.dlq_subjects),
        stream_facts(conn, ns.stream, ns.later_filter()),
        stream_facts(conn, ns.schedules_stream, ns.delayed_filter()),
        _workers_per_queue(app, conn, workers),
        asyncio.gather(*(consumer_facts(conn, ns.partition_stream(k)) for k in partitions)),
    )
    delayed: dict[str, int] = {}
    next_due: dict[str, int] = {}
    # A job made a schedule an instant ago may still stand as enqueued too (its message is
    # acknowledged just after): each delayed job counts once.
    waiting = {
        parsed: count
        for subjects, parse in (
            (enqueued.subjects, ns.parse_later_subject),
            (scheduled.subjects, ns.parse_delayed_subject),
        )
        for subject, count in (subjects or {}).items()
        if (parsed := parse(subject)) is not None
    }
    for (queue, due, _), count in waiting.items():
        delayed[queue] = delayed.get(queue, 0) + count
        next_due[queue] = min(due, next_due.get(queue, due))
    dead = _per_queue(dlq, ns.parse_dlq_subject)
    # A consumer with another filter is not a jsworker queue (someone's own inspector, say).
    by_partition: list[dict[str, ConsumerFacts]] = [
        {c.name: c for c in found if c.filter_subject == ns.queue_filter(c.name, k)}
        for k, found in enumerate(consumers)
    ]
    by_queue = {q: _combined([p[q] for p in by_partition if q in p]) for p0 in by_partition for q in p0}
    unserved = [q for q in app.queues if q not in by_queue]
    stored: dict[str, int] = {}
    counted = await asyncio.gather(
        *(
            stream_facts(conn, ns.partition_stream(k), ns.queue_filter(q, k))
            for q in unserved
            for k in partitions
        )
    )
    for facts in counted:
        for queue, count in _per_queue(facts, ns.parse_job_subject).items():
            stored[queue] = stored.get(queue, 0) + count
    queues = sorted(set(app.queues) | set(by_queue) | set(dead) | set(delayed) | set(serving or ()))

    unread = [q for q in queues if q not in by_queue and stored.get(q, 0) > 0]
    oldest = await _oldest_pending(app, conn, by_partition, unread, enqueued.first_seq)
    # The server's clock when it answered: ages do not depend on this machine's clock.
    now = enqueued.server_time or time.time()

    result = []
    for queue in queues:
        consumer = by_queue.get(queue)
        stored_at = oldest.get(queue)
        next_at = next_due.get(queue)
        common: dict[str, Any] = {
            "queue": queue,
            "dead_letters": dead.get(queue, 0),
            "oldest_pending_age": None if stored_at is None else max(0.0, now - stored_at),
            "delayed": delayed.get(queue, 0),
            "next_due_in": None if next_at is None else next_at / 1000 - now,
            "priority": app.queue_priority(queue),
            "workers": None if serving is None else serving.get(queue, 0),
        }
        if consumer is None:
            result.append(QueueStatus(pending=stored.get(queue, 0), **common))
            continue
        result.append(
            QueueStatus(
                pending=consumer.num_pending,
                in_flight=consumer.num_ack_pending,
                redelivered=consumer.num_redelivered,
                waiting_pulls=consumer.num_waiting,
                has_consumer=True,
                paused=consumer.paused,
                delivered=consumer.delivered_consumer_seq,
                overrides=_overrides(consumer.metadata),
                # The app's max_ack_pending is every queue's limit unless it sets max_running.
                max_running=None
                if consumer.max_ack_pending in (None, 0, -1, app.options.max_ack_pending)
                else consumer.max_ack_pending,
                **common,
            )
        )
    return result


async def _oldest_pending(
    app: AppView, conn: Connection, consumers: list[dict[str, ConsumerFacts]], unserved: list[str], first: int
) -> dict[str, float]:
    """When the oldest job of each queue that no worker has received yet was stored: the
    oldest of its partitions'. ``consumers``: each partition's queue consumers; ``unserved``:
    queues with jobs and no consumer; ``first``: partition 0's first sequence."""
    ns = app.namespace
    starts: list[dict[str, tuple[str, int]]] = []
    for k, by_queue in enumerate(consumers):
        # Jobs past a consumer's delivered sequence are exactly the ones it has not handed
        # out; on a work-queue stream everything before is done or in flight.
        starts.append(
            {
                q: (ns.queue_filter(q, k), c.delivered_stream_seq + 1)
                for q, c in by_queue.items()
                if c.num_pending
            }
        )
        starts[k].update({q: (ns.queue_filter(q, k), first if k == 0 else 1) for q in unserved})
    oldest: dict[str, float] = {}
    found = await asyncio.gather(
        *(first_stored_times(conn, ns.partition_stream(k), s) for k, s in enumerate(starts))
    )
    for firsts in found:
        for queue, stored_at in firsts.items():
            if stored_at is not None:
                oldest[queue] = min(stored_at, oldest.get(queue, stored_at))
    return oldest


def _overrides(metadata: Mapping[str, str]) -> dict[str, str]:
    # jsworker's keys in a consumer's metadata ("jsw_<name>"): limits set at run time.
    return {key[4:]: value for key, value in metadata.items() if key.startswith("jsw_")}


def _combined(parts: list[ConsumerFacts]) -> ConsumerFacts:
    """A queue's consumers on the streams of its partitions, counted as one: the first one's
    settings, everyone's counts."""
    if len(parts) == 1:
        return parts[0]
    return dataclasses.replace(
        parts[0],
        num_pending=sum(p.num_pending for p in parts),
        num_ack_pending=sum(p.num_ack_pending for p in parts),
        num_redelivered=sum(p.num_redelivered for p in parts),
        num_waiting=sum(p.num_waiting for p in parts),
        delivered_consumer_seq=sum(p.delivered_consumer_seq for p in parts),
        # Paused as a whole only: a pause that reached some partitions still hands out others'.
        paused=all(p.paused for p in parts),
    )


async def _workers_per_queue(app: AppView, conn: Connection, wanted: bool) -> Counter[str] | None:
    """How many live workers pull from each queue; None when not ``wanted`` or on a server
    without the registry."""
    if not wanted or conn.server_version < REGISTRY_SINCE:
        return None
    try:
        entries = await live_workers(app, conn)
    except StreamRequestError as exc:
        # As every other read of a refresh fails: `status --watch` rides out transient ones.
        raise TopologyError(f"cannot read the worker registry: {exc}", transient=exc.transient) from exc
    return Counter(queue for entry in entries for queue in entry.queues)


def format_age(seconds: float | None) -> str:
    """``3s``, ``2m5s``, ``1h2m``, ``3d4h``; ``-`` for None. Two units at most: it is for eyes."""
    if seconds is None:
        return "-"
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    return f"{secs}s"
