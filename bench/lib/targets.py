"""How figures compare: each jsworker figure's baseline from the same run, and the targets."""

from __future__ import annotations

import operator
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from .stats import Measurement, Summary


@dataclass(frozen=True)
class Comparison:
    """``figure`` set against ``baseline`` (by ratio or difference) or against a fixed bound.

    ``kind`` is ``"ratio"`` (figure / baseline), ``"diff"`` (figure - baseline) or
    ``"value"`` (the figure itself). ``target`` is checked on the median over runs.
    """

    figure: str
    baseline: str | None
    kind: str
    op: str | None = None
    target: float | None = None

    def check(self, value: float) -> bool | None:
        """True/False against the target, None when there is none."""
        if self.op is None or self.target is None:
            return None
        return _OPS[self.op](value, self.target)

    @property
    def target_text(self) -> str:
        """The target as shown in the table, e.g. ``>= 0.85x``."""
        if self.op is None or self.target is None:
            return ""
        suffix = {"ratio": "x", "diff": " ms vs raw"}.get(self.kind, "")
        return f"{self.op} {self.target:g}{suffix}"


_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "<": operator.lt,
}

COMPARISONS = [
    Comparison("enqueue.adelay", "enqueue.raw_publish", "ratio", ">=", 0.85),
    Comparison("enqueue.delay_sync", "enqueue.raw_publish", "ratio"),
    Comparison("enqueue.adelay_many", "enqueue.raw_publish_async", "ratio", ">=", 0.80),
    Comparison("enqueue.adelay_many", "enqueue.raw_publish_async_sliding", "ratio"),
    # The like-for-like baseline: raw publishing of the same messages, per-job subjects included.
    Comparison("enqueue.adelay_many", "enqueue.raw_publish_async_per_job", "ratio", ">=", 0.85),
    # The simple way a user would measure it: a plain publish_async loop (kept beside the
    # windowed baselines, which give a kinder ratio).
    Comparison("enqueue.adelay_many", "enqueue.raw_publish_async_plain", "ratio", ">=", 0.85),
    Comparison("enqueue.adelay_typed", "enqueue.adelay_untyped", "ratio"),
    Comparison("enqueue.adelay_many_typed", "enqueue.adelay_many_untyped", "ratio"),
    Comparison("processing.raw_fetch", "processing.raw_continuous", "ratio"),
    Comparison("processing.async", "processing.raw_continuous", "ratio", ">=", 0.60),
    Comparison("processing.async_uvloop", "processing.async", "ratio"),
    # The worker's CPU per job against the raw pull's: 1.18x is 0.85x as efficient.
    Comparison("processing.cpu.async", "processing.cpu.raw_continuous", "ratio", "<=", 1.18),
    Comparison("processing.async_2workers", "processing.raw_continuous", "ratio"),
    Comparison("processing.sync", "processing.raw_continuous", "ratio"),
    # Typed arguments: the same calls with and without annotations, same bodies.
    Comparison("processing.async_typed", "processing.async_untyped", "ratio"),
    Comparison("latency.jsworker_200.p50", "latency.raw_200.p50", "diff", "<=", 0.5),
    Comparison("latency.jsworker_200.p99", None, "value", "<=", 5.0),
    Comparison("mixed.efficiency", None, "value", ">=", 0.90),
    Comparison("memory.growth_mb", None, "value", "<", 10.0),
    Comparison("peers.taskiq_processing", "processing.async", "ratio"),
    Comparison("peers.taskiq_tuned_processing", "processing.async", "ratio"),
    Comparison("peers.dramatiq_processing", "processing.async", "ratio"),
    Comparison("peers.taskiq_enqueue", "enqueue.adelay", "ratio"),
    Comparison("peers.taskiq_enqueue_gather", "enqueue.adelay_many", "ratio"),
    Comparison("peers.dramatiq_enqueue", "enqueue.delay_sync", "ratio"),
    # Delayed jobs (bench/schedules.py): lateness against a plain burst, all 1,000 started,
    # none early or twice; fired against plain jobs; 100,000 pending against an empty server.
    Comparison("schedules.accuracy.late_p50", "schedules.burst.late_p50", "diff"),
    Comparison("schedules.accuracy.late_p99", "schedules.burst.late_p99", "diff"),
    Comparison("schedules.accuracy.late_max", "schedules.burst.late_max", "diff"),
    Comparison("schedules.accuracy.started", None, "value", ">=", 1000),
    Comparison("schedules.accuracy.early", None, "value", "<=", 0),
    Comparison("schedules.accuracy.duplicates", None, "value", "<=", 0),
    Comparison("schedules.processing.fired", "schedules.processing.plain", "ratio"),
    Comparison("schedules.enqueue.countdown_us", "schedules.enqueue.adelay_us", "ratio"),
    Comparison("schedules.pending.enqueue_rate", "schedules.pending.plain_enqueue_rate", "ratio"),
    Comparison("schedules.pending.rss_after_mb", "schedules.pending.rss_before_mb", "ratio"),
    Comparison("schedules.pending.rss_restarted_mb", "schedules.pending.rss_before_mb", "ratio"),
    Comparison("schedules.pending.cancel_p50", "schedules.empty.cancel_p50", "ratio"),
    Comparison("schedules.pending.restart_info_ms", "schedules.empty.restart_info_ms", "ratio"),
    Comparison("schedules.pending.restart_accept_ms", "schedules.empty.restart_accept_ms", "ratio"),
    # Job lifecycle (bench/lifecycle.py): a result's round trip against raw request/reply at
    # 200/s; processing with results against without and against the raw pull; enqueue of a
    # unique or expiring job against a plain one and raw publishes; jobs on a subject each
    # against the same count on one subject.
    Comparison("lifecycle.result_200.p50", None, "value", "<=", 2.0),
    Comparison("lifecycle.result_200.p50", "lifecycle.reqrep_200.p50", "ratio"),
    Comparison("lifecycle.result_200.p99", "lifecycle.reqrep_200.p99", "ratio"),
    Comparison("lifecycle.processing.results_on", "lifecycle.processing.results_off", "ratio", ">=", 0.70),
    Comparison("lifecycle.processing.results_on", "lifecycle.processing.raw_continuous", "ratio"),
    Comparison("lifecycle.processing.final_states", "lifecycle.processing.results_off", "ratio", ">=", 0.65),
    Comparison("lifecycle.processing.results_off", "lifecycle.processing.raw_continuous", "ratio"),
    Comparison("lifecycle.enqueue.adelay", "lifecycle.enqueue.raw_publish", "ratio"),
    Comparison("lifecycle.enqueue.expires", "lifecycle.enqueue.adelay", "ratio"),
    Comparison("lifecycle.enqueue.expires", "lifecycle.enqueue.raw_publish", "ratio"),
    Comparison("lifecycle.enqueue.raw_publish_unique", "lifecycle.enqueue.raw_publish", "ratio"),
    Comparison("lifecycle.enqueue.unique", "lifecycle.enqueue.adelay", "ratio"),
    Comparison("lifecycle.enqueue.unique", "lifecycle.enqueue.raw_publish_unique", "ratio"),
]
# Middleware (bench/middleware.py): no middleware today against the commit before (no cost,
# within noise), a no-op middleware against none (its cost; a generous bound), an on_enqueue
# that adds a header against none.
for _res in ("results_off", "results_on"):
    _p, _c = f"middleware.processing.{_res}", f"middleware.cpu.{_res}"
    COMPARISONS += [
        Comparison(f"{_p}.none", f"{_p}.before", "ratio", ">=", 0.97),
        Comparison(f"{_p}.all_hooks", f"{_p}.none", "ratio", ">=", 0.70),
        Comparison(f"{_p}.around_run", f"{_p}.none", "ratio"),
        Comparison(f"{_c}.none", f"{_c}.before", "ratio", "<=", 1.03),
        Comparison(f"{_c}.all_hooks", f"{_c}.none", "ratio"),
        Comparison(f"{_c}.around_run", f"{_c}.none", "ratio"),
    ]
for _form in ("adelay_many", "adelay"):
    _e = f"middleware.enqueue.{_form}"
    COMPARISONS += [
        Comparison(f"{_e}.none", f"{_e}.before", "ratio", ">=", 0.97),
        Comparison(f"{_e}.header", f"{_e}.none", "ratio"),
    ]
for _what in ("rss_growth_mb", "rss_restarted_mb", "stream_mb", "store_mb", "restart_ms"):
    COMPARISONS.append(
        Comparison(f"lifecycle.pending.per_id.{_what}", f"lifecycle.pending.one_subject.{_what}", "ratio")
    )
# jsworker's processing rate as a multiple of taskiq-nats's (the ">= 4x" target).
PEER_TARGETS = [
    Comparison("processing.async", "peers.taskiq_processing", "ratio", ">=", 4.0),
]
for _rate in (200, 2000):
    for _p in ("p50", "p95", "p99"):
        _fig = f"latency.jsworker_{_rate}.{_p}"
        if not any(c.figure == _fig for c in COMPARISONS):
            COMPARISONS.append(Comparison(_fig, f"latency.raw_{_rate}.{_p}", "diff"))


@dataclass
class Verdict:
    """A figure's comparison over all runs."""

    comparison: Comparison
    values: list[float]  # per run: ratio, difference or value

    @property
    def median(self) -> float:
        """Median over runs."""
        return statistics.median(self.values)

    @property
    def passed(self) -> bool | None:
        """Whether the median meets the target (None: no target)."""
        return self.comparison.check(self.median)


def compare(runs: list[list[Measurement]], summaries: dict[str, Summary]) -> dict[str, list[Verdict]]:
    """Every applicable comparison, computed per run (same run, same server), by figure."""
    out: dict[str, list[Verdict]] = {}
    for comp in COMPARISONS + PEER_TARGETS:
        if comp.figure not in summaries or (comp.baseline and comp.baseline not in summaries):
            continue
        values = []
        for run in runs:
            by_name = {m.figure: m.value for m in run}
            if comp.figure not in by_name or (comp.baseline and comp.baseline not in by_name):
                continue
            value = by_name[comp.figure]
            if comp.kind == "ratio" and comp.baseline:
                values.append(value / by_name[comp.baseline] if by_name[comp.baseline] else float("nan"))
            elif comp.kind == "diff" and comp.baseline:
                values.append(value - by_name[comp.baseline])
            else:
                values.append(value)
        if values:
            out.setdefault(comp.figure, []).append(Verdict(comp, values))
    return out
