"""One Prometheus endpoint for a fleet: the worker processes' metrics, merged.

Each worker process sends the supervisor its whole exposition about once a second and once
more as it exits. Counters and histograms are summed over the live processes and over every
process that has exited (its last snapshot is kept), so a total never goes down when a process
is recycled or restarted. Gauges are combined as fits each: what a process holds (jobs running,
its concurrency, its memory) is summed; what every process reads from the same server (queue
figures) or states alike (info) takes the largest value, and "the server could be read" the
smallest, so one process that cannot read it shows.

A process killed without warning loses what it counted since its last snapshot (at most a
second's worth); a process that exits cleanly loses nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

_SUMMED = ("counter", "histogram", "summary", "gaugehistogram")
# Gauges every process reads from the same place: summing would count them once per process.
_LARGEST_PREFIXES = ("jsworker_queue_", "jsworker_dead_letters", "jsworker_worker_info", "python_info")
_LARGEST = ("process_start_time_seconds", "process_max_fds")
_SMALLEST = ("jsworker_queue_reachable",)

SampleKey = tuple[str, tuple[tuple[str, str], ...]]


class _Family:
    __slots__ = ("documentation", "samples", "type")

    def __init__(self, typ: str, documentation: str) -> None:
        self.type = typ
        self.documentation = documentation
        self.samples: dict[SampleKey, float] = {}


def _combine(family: str, typ: str, old: float, new: float) -> float:
    if typ in _SUMMED:
        return old + new
    if family in _SMALLEST:
        return min(old, new)
    if family in _LARGEST or family.startswith(_LARGEST_PREFIXES):
        return max(old, new)
    return old + new


def _merge(into: dict[str, _Family], families: Iterable[Metric], *, totals_only: bool = False) -> None:
    for metric in families:
        if totals_only and metric.type not in _SUMMED:
            continue
        family = into.get(metric.name)
        if family is None:
            family = into[metric.name] = _Family(metric.type, metric.documentation)
        for sample in metric.samples:
            if sample.name.endswith("_created"):
                continue  # a creation time has no meaning once processes are added up
            key = (sample.name, tuple(sorted(sample.labels.items())))
            found = family.samples.get(key)
            family.samples[key] = (
                sample.value if found is None else _combine(metric.name, metric.type, found, sample.value)
            )


class FleetMetrics(Collector):
    """The merged metrics of a supervisor's worker processes (a prometheus-client collector)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[int, str] = {}  # pid -> its last exposition
        self._retired: dict[str, _Family] = {}

    def update(self, pid: int, exposition: str) -> None:
        """Keep ``exposition`` as process ``pid``'s latest."""
        with self._lock:
            self._live[pid] = exposition

    def retire(self, pid: int) -> None:
        """Process ``pid`` has exited: its counters and histograms stay in the totals, its
        gauges go."""
        with self._lock:
            last = self._live.pop(pid, None)
            if last is not None:
                _merge(self._retired, text_string_to_metric_families(last), totals_only=True)

    def collect(self) -> Iterator[Metric]:
        """The merged families (called by the scraping thread)."""
        with self._lock:
            merged: dict[str, _Family] = {}
            for name, family in self._retired.items():
                copy = merged[name] = _Family(family.type, family.documentation)
                copy.samples.update(family.samples)
            live = list(self._live.values())
        for exposition in live:
            _merge(merged, text_string_to_metric_families(exposition))
        for name, family in merged.items():
            metric = Metric(name, family.documentation, family.type)
            for (sample, labels), value in family.samples.items():
                metric.add_sample(sample, dict(labels), value)
            yield metric
