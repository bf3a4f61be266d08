"""The server's figures for the queues a worker consumes, exported only while they are current.

A worker reads them on an interval (one read serves every scrape). When a read fails, the
figures are dropped rather than left at their last value: a backlog frozen at 0 while the
stream cannot be reached would tell the dashboard that all is well. ``jsworker_queue_reachable``
says which case it is, and is what the "cannot reach its stream" alert watches.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class QueueReading(Protocol):
    """What the figures take of one queue's status (:class:`jsworker._core.queues.QueueStatus`
    is one): metrics sit below the modules that read the server, so they name no type of theirs."""

    @property
    def queue(self) -> str: ...

    @property
    def dead_letters(self) -> int: ...


# (attribute of the status, metric name, help): one gauge per queue each.
_GAUGES = (
    ("pending", "jsworker_queue_pending", "Jobs waiting in the queue."),
    ("in_flight", "jsworker_queue_ack_pending", "Jobs delivered and not yet settled."),
    ("redelivered", "jsworker_queue_redelivered", "Jobs delivered more than once, not yet settled."),
    ("waiting_pulls", "jsworker_queue_waiting_pulls", "Pull requests waiting on the queue's consumer."),
    (
        "oldest_pending_age",
        "jsworker_queue_oldest_pending_age_seconds",
        "Age of the oldest job not yet handed to a worker (0 when none).",
    ),
    ("delayed", "jsworker_queue_delayed", "Delayed jobs waiting on the server for their due time."),
    ("paused", "jsworker_queue_paused", "1 while the queue is paused (no job is handed out), else 0."),
)
REACHABLE = "jsworker_queue_reachable"


class QueueFigures(Collector):
    """The last successful read per queue, or None after a failed one."""

    #: Label names of each family, as prometheus-client's own metric objects tell them.
    LABELS = {
        **{name: ("queue",) for _, name, _ in _GAUGES},
        REACHABLE: ("queue",),
        "jsworker_dead_letters": (),
    }

    def __init__(self) -> None:
        self._queues: dict[str, dict[str, float] | None] = {}
        self._dead_letters: float | None = None

    def read(self, queues: Iterable[str], statuses: Iterable[QueueReading]) -> None:
        """Record a successful read of ``queues`` (a queue not in ``statuses`` reads as empty)."""
        wanted = set(queues)
        seen: dict[str, dict[str, float]] = {
            q: dict.fromkeys((a for a, _, _ in _GAUGES), 0.0) for q in wanted
        }
        dead = 0.0
        for st in statuses:
            dead += st.dead_letters
            if st.queue in wanted:
                seen[st.queue] = {attr: float(getattr(st, attr) or 0.0) for attr, _, _ in _GAUGES}
        self._queues.update(seen)
        self._dead_letters = dead

    def unreachable(self, queues: Iterable[str]) -> None:
        """Record that the server could not be read for ``queues``: their figures go."""
        for queue in queues:
            self._queues[queue] = None
        self._dead_letters = None

    def describe(self) -> Iterator[Metric]:
        """The families without samples (the registry checks names with it)."""
        return self._families({}, None)

    def collect(self) -> Iterator[Metric]:
        """Build the families from the current figures (called from the scraping thread)."""
        return self._families(dict(self._queues), self._dead_letters)

    @staticmethod
    def _families(queues: dict[str, dict[str, float] | None], dead_letters: float | None) -> Iterator[Metric]:
        for attr, name, doc in _GAUGES:
            family = GaugeMetricFamily(name, doc, labels=("queue",))
            for queue, figures in queues.items():
                if figures is not None:
                    family.add_metric((queue,), figures[attr])
            yield family
        reachable = GaugeMetricFamily(
            REACHABLE, "1 when the worker's last read of the queue's figures from the server worked, else 0.",
            labels=("queue",),
        )  # fmt: skip
        for queue, figures in queues.items():
            reachable.add_metric((queue,), 0.0 if figures is None else 1.0)
        yield reachable
        dead = GaugeMetricFamily("jsworker_dead_letters", "Messages in the dead-letter stream.")
        if dead_letters is not None:
            dead.add_metric((), dead_letters)
        yield dead
