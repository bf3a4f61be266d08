"""Job metrics and the worker's log line per settled job (``after_settled``); at debug
level, a line as each job is taken up too (``admit``). A side channel that never changes a
job's fate."""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

from ..._observability.jobmetrics import TaskMetrics
from ..._observability.logging import get_logger
from ..._observability.metrics import Metrics
from ..execution import JobRun
from ..outcomes import NOT_STARTED, STOPPED_WHILE_RUNNING, Decision, Outcome, OutcomeKind, Settlement, Verb
from ..pipeline import Interceptor

log = get_logger("jsworker.worker")

_NAMES = {kind: kind.value for kind in OutcomeKind}  # Enum.value is slow enough to matter here


class JobMetrics(Interceptor):
    """Counts and logs settled jobs for one worker.

    Built when the worker starts, after logging is configured: it resolves the logger once,
    because every call through structlog's lazy module-level proxy costs a lookup, and a
    filtered-out debug call per job should cost next to nothing.
    """

    name = "metrics"

    def __init__(self, metrics: Metrics, counts: Counter[str]) -> None:
        self.metrics = metrics
        self.counts = counts
        # The registry's own per-task numbers, asked directly: through Metrics.task, one call
        # more for every job.
        self._numbers = metrics.jobs.task
        self.log = log.bind()
        self._debug = debug_logged(self.log)

    def after_settled(self, job: JobRun, settlement: Settlement) -> None:
        """Count and log one settled job (one event per job)."""
        outcome, decision, duration = settlement.outcome, settlement.decision, settlement.duration
        kind = outcome.kind
        m = self._numbers(job.queue, job.task_label)
        if kind is OutcomeKind.SUCCEEDED:
            # Nearly every job: the shortest path, with no enum hashing and no branches.
            self.counts["succeeded"] += 1
            m.succeeded += 1
            _observe_run(m, job, duration)
            # Debug, not info: a line per successful job is most of a busy worker's cost and
            # of its log volume; metrics and job events count successes.
            if self._debug:
                self.log.debug("job.succeeded", outcome="succeeded", duration=duration, **job.log_fields())
            return
        name = _NAMES[kind]
        self.counts[name] += 1
        if kind is OutcomeKind.SKIPPED:
            return  # counted and logged where it was decided (the firing claim)
        if kind is OutcomeKind.LEFT:
            self.log.info("job.left", reason=outcome.reason, **job.log_fields())
            return
        if kind is OutcomeKind.EXPIRED or kind is OutcomeKind.ABORTED:
            self._never_again(m, job, outcome, duration)
            return
        if kind not in NOT_STARTED:
            _observe_run(m, job, duration)
        if kind is OutcomeKind.FAILED:
            m.failed += 1
        elif kind is OutcomeKind.TIMED_OUT:
            m.timed_out += 1
        if kind is OutcomeKind.SNOOZED:
            self._snoozed(m, job, outcome, decision)
            return
        if decision.verb is Verb.NAK:
            if kind is not OutcomeKind.CANCELLED:
                m.retried += 1
            self.log.warning(
                "job.retry", outcome=name, reason=outcome.reason, delay=decision.delay, **job.log_fields()
            )
        else:
            m.dead_lettered[name] += 1
            self.log.error(
                "job.dead_lettered",
                outcome=name,
                reason=decision.reason,
                duration=duration,
                **job.log_fields(),
            )

    def _snoozed(self, m: TaskMetrics, job: JobRun, outcome: Outcome, decision: Decision) -> None:
        """Count a job snoozed by its task, or given back by a limit (which the limit's own
        metric counts, and which is logged at debug: it comes back as often as it is held)."""
        if outcome.held:
            if self._debug:
                fields = job.log_fields()
                self.log.debug("job.given_back", reason=outcome.reason, delay=decision.delay, **fields)
            return
        m.snoozed += 1
        self.log.info("job.snoozed", reason=outcome.reason, delay=decision.delay, **job.log_fields())

    def _never_again(self, m: TaskMetrics, job: JobRun, outcome: Outcome, duration: float) -> None:
        """Count an expired or cancelled job: never run again, and no failure (the cancel
        counted itself where it was asked)."""
        if outcome.kind is OutcomeKind.EXPIRED:
            self.metrics.expired.labels(job.queue, job.task_label).inc()
        elif outcome.reason == STOPPED_WHILE_RUNNING:
            _observe_run(m, job, duration)  # it started: every start counts
        self.log.info(f"job.{_NAMES[outcome.kind]}", reason=outcome.reason, **job.log_fields())


def _observe_run(m: TaskMetrics, job: JobRun, duration: float) -> None:
    """Count a run that started: its duration, and its queue wait on a first attempt."""
    m.started += 1
    m.duration.observe(duration)
    if job.delivery.attempt == 1 and (enqueued_at := job.enqueued_at) is not None:
        m.queue_wait.observe(max(0.0, time.time() - enqueued_at - duration))


class JobMetricsLogged(JobMetrics):
    """:class:`JobMetrics` with a debug line as each job is taken up, for a worker that logs
    at debug level (at any other level it costs no call per job)."""

    def admit(self, job: JobRun) -> None:
        """Log that ``job`` passed its own checks and is about to start (debug)."""
        self.log.debug("job.started", **job.log_fields())


def debug_logged(logger: Any) -> bool:
    """Whether ``logger`` (bound) writes debug lines."""
    is_enabled_for = getattr(logger, "is_enabled_for", None)
    return is_enabled_for is None or bool(is_enabled_for(logging.DEBUG))
