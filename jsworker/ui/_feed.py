"""The figures the pages update themselves with, read once for every open page.

One task per dashboard process reads the queues, the workers and the job stream's health
through :class:`~jsworker.admin.Admin` every :data:`INTERVAL` seconds and keeps the latest
reading as a JSON-ready snapshot; every open page's event stream (``/live``) sends each new
one. Ten open tabs cost the server what one does.

The charts show, per queue, the jobs started and the jobs dead-lettered per second. For an app
with job events (``App(events=True)``) they come from the events stream through
:meth:`Admin.event_counts <jsworker.admin.Admin.event_counts>`: the last 15 minutes in
30-second buckets, read once when the feed starts (so a restarted dashboard shows them at
once), then only the events that came since at each reading. Without events (or while the
events cannot be read) they are sampled here: each reading's change in a queue's deliveries
(its consumer's counter) is the rate jobs start at, and a rise in its dead letters the rate
they fail at. That history begins when the dashboard's process first served a page and holds
the last :data:`KEEP` readings (five minutes); a restarted dashboard starts over.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from .._core.queues import QueueStatus
from .._errors import EventsNotFound, JsworkerError, ServerVersionError
from .._observability.logging import get_logger
from .._registry.entries import WorkerEntry
from ..admin import Admin
from ..events._window import BUCKET, WINDOW, EventCounts
from ..jetstream.health import StreamHealth
from ._errors import describe

log = get_logger("jsworker.ui")

#: Seconds between two readings.
INTERVAL = 2.0
#: Readings kept for the charts.
KEEP = 150
#: Seconds without a page served or an event stream open after which the reading stops
#: (the next page starts it again): a forgotten dashboard costs the server nothing.
IDLE = 900.0
# A reading that takes longer than this is given up (the server is down or overloaded).
_READ_TIMEOUT = 15.0
# The events' part of a reading gets less: the figures must not wait for the charts.
_EVENTS_TIMEOUT = 10.0
#: The kinds of event each chart counts, by the series' name.
CHARTED = {"started": "started", "failed": "dead_lettered"}


class _Series:
    """One queue's chart data: jobs started and failed per second, one point a reading."""

    def __init__(self) -> None:
        self.started: deque[float] = deque(maxlen=KEEP)
        self.failed: deque[float] = deque(maxlen=KEEP)
        self.last: tuple[float, int, int] | None = None  # (time, delivered, dead letters)

    def add(self, at: float, delivered: int, dead: int) -> None:
        if self.last is not None and at > self.last[0]:
            span = at - self.last[0]
            # A counter that went down was reset (consumer made again, letters replayed).
            self.started.append(round(max(0, delivered - self.last[1]) / span, 2))
            self.failed.append(round(max(0, dead - self.last[2]) / span, 2))
        self.last = (at, delivered, dead)

    def as_dict(self) -> dict[str, list[float]]:
        return {"started": list(self.started), "failed": list(self.failed)}


class Feed:
    """The shared reading (see the module); started by the first page served."""

    def __init__(self, admin: Admin, interval: float = INTERVAL) -> None:
        self.admin = admin
        self.interval = interval
        self._series: dict[str, _Series] = {}
        # The events counted so far (None: none read yet, or events are off or unreadable).
        self._counts: EventCounts | None = None
        self._events = bool(admin.app.options.events)
        self._latest: dict[str, Any] | None = None
        self._changed = asyncio.Condition()
        self._poked = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._touched = time.monotonic()

    def start(self) -> None:
        """Begin reading, on the running event loop, unless it already does."""
        self._touched = time.monotonic()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="jsworker-ui-feed")

    def poke(self) -> None:
        """Read again now rather than at the next interval (an action changed something)."""
        self._poked.set()

    async def aclose(self) -> None:
        """Stop reading."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def latest(self) -> dict[str, Any]:
        """The newest snapshot, waiting for the first one."""
        self.start()
        async with self._changed:
            await self._changed.wait_for(lambda: self._latest is not None)
            assert self._latest is not None
            return self._latest

    async def updates(self, limit: float | None = None) -> AsyncIterator[dict[str, Any]]:
        """The newest snapshot, then each new one as it comes, for ``limit`` seconds (forever
        when None)."""
        end = None if limit is None else time.monotonic() + limit
        seen: dict[str, Any] | None = None
        while end is None or time.monotonic() < end:
            self.start()
            seen = await self._after(seen)
            yield seen

    async def _after(self, seen: dict[str, Any] | None) -> dict[str, Any]:
        """The first snapshot that is not ``seen``."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._latest is not None and self._latest is not seen)
            assert self._latest is not None
            return self._latest

    async def _run(self) -> None:
        while time.monotonic() - self._touched < IDLE:
            started = time.monotonic()
            snapshot = await self._read()
            async with self._changed:
                self._latest = snapshot
                self._changed.notify_all()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._poked.wait(), max(0.1, self.interval - (time.monotonic() - started))
                )
            self._poked.clear()

    async def _read(self) -> dict[str, Any]:
        # A snapshot is as old as the moment its reading began: a page rendered after that
        # may show newer figures, and skips it.
        began = time.time()
        try:
            async with asyncio.timeout(_READ_TIMEOUT):
                queues, workers, health, counts = await asyncio.gather(
                    self.admin.queues(), registered(self.admin), self.admin.health(), self._count_events()
                )
        except (JsworkerError, TimeoutError) as exc:
            return self._failed(describe(exc).message)
        except Exception:
            log.exception("ui.feed_failed")
            return self._failed("the figures could not be read (see the dashboard's log)")
        return self._snapshot(began, queues, workers, health, counts)

    async def _count_events(self) -> EventCounts | None:
        """The events counted over the charts' window, brought up to date; None when the app
        has no events (the charts are sampled then)."""
        if not self._events:
            return None
        try:
            async with asyncio.timeout(_EVENTS_TIMEOUT):
                if self._counts is None:
                    self._counts = await self.admin.event_counts(tuple(CHARTED.values()))
                else:
                    newer = await self.admin.event_counts(
                        tuple(CHARTED.values()), after_seq=self._counts.last_seq
                    )
                    self._counts = self._counts.merged(newer)
        except EventsNotFound:
            # No worker created the stream yet: sampled until it exists (asked again each time).
            self._counts = None
        except (JsworkerError, TimeoutError) as exc:
            # Sampled this time; the next reading tries again from where the counts are.
            log.warning("ui.events_unread", error=describe(exc).message)
            return None
        return self._counts

    def _failed(self, why: str) -> dict[str, Any]:
        # The last figures stay on the pages, with the reason they are not fresh.
        failed = dict(self._latest or _empty())
        failed["error"] = why
        return failed

    def _snapshot(
        self,
        now: float,
        queues: list[QueueStatus],
        workers: list[WorkerEntry],
        health: StreamHealth,
        counts: EventCounts | None,
    ) -> dict[str, Any]:
        for queue in queues:
            self._series.setdefault(queue.queue, _Series()).add(now, queue.delivered, queue.dead_letters)
        if counts is not None:
            names = sorted({q.queue for q in queues} | set(counts.queues()))
            series = {q: {name: counts.rates(q, kind, now) for name, kind in CHARTED.items()} for q in names}
            charts = {"source": "events", "window": WINDOW, "bucket": BUCKET, "since": counts.since}
        else:
            series = {name: s.as_dict() for name, s in self._series.items()}
            charts = {"source": "sampled", "window": KEEP * self.interval, "bucket": self.interval}
        return {
            "at": now,
            "error": None,
            "health": health_dict(health),
            "totals": totals(queues, workers),
            "order": [q.queue for q in queues],
            "queues": {q.queue: q.as_dict() for q in queues},
            "workers": [worker_dict(w, now) for w in workers],
            "series": series,
            "charts": charts,
        }

    def charts(self) -> dict[str, Any]:
        """Where the charts come from (``source``: ``events`` or ``sampled``) and what they
        span (``window`` and ``bucket``, seconds), as the latest reading says, else as it
        will."""
        if self._latest is not None and "charts" in self._latest:
            found: dict[str, Any] = self._latest["charts"]
            return found
        if self._events:
            return {"source": "events", "window": WINDOW, "bucket": BUCKET}
        return {"source": "sampled", "window": KEEP * self.interval, "bucket": self.interval}


async def registered(admin: Admin) -> list[WorkerEntry]:
    """The live workers; none on a server too old to keep their registry (before 2.11)."""
    try:
        return await admin.workers()
    except ServerVersionError:
        return []


def _empty() -> dict[str, Any]:
    return {"at": time.time(), "order": [], "queues": {}, "workers": [], "series": {}, "totals": {}}


def totals(queues: list[QueueStatus], workers: list[WorkerEntry]) -> dict[str, int]:
    """The figures of all queues together, and the live workers."""
    return {
        "queues": len(queues),
        "waiting": sum(q.pending for q in queues),
        "in_flight": sum(q.in_flight for q in queues),
        "delayed": sum(q.delayed for q in queues),
        "dead_letters": sum(q.dead_letters for q in queues),
        "paused": sum(q.paused for q in queues),
        "workers": len(workers),
        "running": sum(w.running for w in workers),
    }


def worker_dict(entry: WorkerEntry, now: float) -> dict[str, Any]:
    """A worker's registry entry with its age and the time since it was last seen."""
    doc = entry.as_dict()
    doc["age"] = max(0.0, now - entry.started_at)
    doc["seen"] = max(0.0, now - entry.seen_at)
    doc["queue_list"] = ", ".join(entry.queues)
    doc["state"] = "taking jobs" if entry.quiet_since is None else "quiet"
    return doc


def health_dict(health: StreamHealth) -> dict[str, Any]:
    """The server's version and the job stream's health, JSON-ready; ``state`` says it in
    words (a new app's stream is not missing, it is not made yet)."""
    state = "healthy" if health.healthy else "degraded" if health.exists else "not created yet"
    return {
        "server_version": health.server_version,
        "exists": health.exists,
        "healthy": health.healthy,
        "state": state,
        "cluster": health.cluster,
        "leader": health.leader,
        "messages": health.messages,
        "bytes": health.bytes,
        "replicas": [
            {"name": r.name, "current": r.current, "offline": r.offline, "lag": r.lag}
            for r in health.replicas
        ],
    }
