"""What the worker tells operators about jobs and the pull loop: log events and metrics.

Kept apart from the worker so the worker reads as control flow; everything here is a
side-channel that must never change a job's fate.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

from ..events.emit import EventEmitter
from ..jetstream.consume import EngineEvent
from ..jetstream.topology import ReplicasDiffer
from ..observability.jobmetrics import TaskMetrics
from ..observability.logging import get_logger
from ..observability.metrics import UNKNOWN, Metrics
from .execution import JobRun
from .limited import HELD_BACK
from .settlement import STOPPED_WHILE_RUNNING, Decision, Outcome, OutcomeKind, Verb

log = get_logger("jsworker.worker")

_NOT_STARTED = (OutcomeKind.BAD_INPUT, OutcomeKind.POISON)
# Outcomes that end no run, of which no event tells.
_NO_END = (OutcomeKind.SKIPPED, OutcomeKind.ABORTED, OutcomeKind.SNOOZED, OutcomeKind.LEFT)


_NAMES = {kind: kind.value for kind in OutcomeKind}  # Enum.value is slow enough to matter here


class JobReporter:
    """Counts and logs settled jobs for one worker.

    Built when the worker starts, after logging is configured: it resolves the logger once,
    because every call through structlog's lazy module-level proxy costs a lookup, and a
    filtered-out debug call per job should cost next to nothing.
    """

    def __init__(self, metrics: Metrics, counts: Counter[str]) -> None:
        self.metrics = metrics
        self.counts = counts
        self.log = log.bind()
        is_enabled_for = getattr(self.log, "is_enabled_for", None)
        self._debug = is_enabled_for is None or bool(is_enabled_for(logging.DEBUG))

    def started(self, job: JobRun) -> None:
        """Log that ``job`` was taken up (debug)."""
        if self._debug:
            self.log.debug("job.started", **job.log_fields())

    def finished(self, job: JobRun, outcome: Outcome, decision: Decision, duration: float) -> None:
        """Count and log one settled job (one event per job)."""
        kind = outcome.kind
        m = self.metrics.task(job.queue, job.task_name if job.task is not None else UNKNOWN)
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
        if kind not in _NOT_STARTED:
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
        if outcome.error is None and outcome.reason.startswith(HELD_BACK):
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
            self.metrics.expired.labels(job.queue, _event_task(job)).inc()
        elif outcome.reason == STOPPED_WHILE_RUNNING:
            _observe_run(m, job, duration)  # it started: every start counts
        self.log.info(f"job.{_NAMES[outcome.kind]}", reason=outcome.reason, **job.log_fields())


def _observe_run(m: TaskMetrics, job: JobRun, duration: float) -> None:
    """Count a run that started: its duration, and its queue wait on a first attempt."""
    m.started += 1
    m.duration.observe(duration)
    if job.attempt == 1:
        enqueued_at = job.enqueued_at
        if enqueued_at is not None:
            m.queue_wait.observe(max(0.0, time.time() - enqueued_at - duration))


async def emit_job_end(
    events: EventEmitter, job: JobRun, outcome: Outcome, decision: Decision, duration: float
) -> None:
    """Publish the events that close a run: ``succeeded``, or ``failed`` and then ``retried``
    or ``dead_lettered`` (a job that never started gets ``dead_lettered`` alone)."""
    queue, task, job_id, attempt = job.queue, _event_task(job), job.job_id, job.attempt
    kind = outcome.kind
    if kind is OutcomeKind.SUCCEEDED:
        await events.emit("succeeded", queue, task, job_id, attempt=attempt, duration=duration)
        return
    if kind in _NO_END:
        # A cancel already told of itself; a snooze is no end (jsworker_jobs_snoozed counts it);
        # a delivery left to another's holder is not this job's end.
        return
    if kind is OutcomeKind.EXPIRED:
        await events.emit("expired", queue, task, job_id, attempt=attempt, reason=outcome.reason)
        return
    if kind not in _NOT_STARTED:
        await events.emit(
            "failed", queue, task, job_id, attempt=attempt, duration=duration, outcome=kind.value,
            reason=outcome.reason,
        )  # fmt: skip
    if decision.verb is Verb.NAK:
        await events.emit("retried", queue, task, job_id, attempt=attempt, delay=decision.delay or 0.0)
    else:
        await events.emit(
            "dead_lettered", queue, task, job_id, attempt=attempt, outcome=kind.value, reason=decision.reason
        )


async def emit_job_start(events: EventEmitter, job: JobRun) -> None:
    """Publish ``started`` for a run that passed its checks."""
    now = time.time()
    enqueued_at = job.enqueued_at
    await events.emit(
        "started", job.queue, _event_task(job), job.job_id, ts=now, attempt=job.attempt,
        enqueued_at=enqueued_at, queue_wait=None if enqueued_at is None else max(0.0, now - enqueued_at),
    )  # fmt: skip


def _event_task(job: JobRun) -> str:
    # The task name becomes a subject token: an undeclared (possibly hostile) one must not.
    return job.task_name if job.task is not None else UNKNOWN


class EngineObserver:
    """Turns pull-loop events into metrics, counts and log lines (pulls and heartbeats stay quiet)."""

    def __init__(self, queue: str, metrics: Metrics, counts: Counter[str]) -> None:
        self.queue = queue
        self.counts = counts
        self._pulls = metrics.pulls.labels(queue)
        self._missed = metrics.heartbeats_missed.labels(queue)
        self._restarts = metrics.pull_restarts.labels(queue)

    def __call__(self, event: EngineEvent, detail: str) -> None:
        if event is EngineEvent.PULL:
            self._pulls.inc()
            return
        if event is EngineEvent.HEARTBEAT:
            return
        self.counts[f"engine.{event.value}"] += 1
        if event is EngineEvent.STATUS:
            log.debug("pull.status", queue=self.queue, status=detail)
            return
        if event is EngineEvent.MISSED_HEARTBEATS:
            self._missed.inc()
        elif event in (EngineEvent.RECONNECT, EngineEvent.ERROR):
            self._restarts.inc()
        if event is EngineEvent.RECONNECT:
            log.info("pull.reconnected", queue=self.queue)
        elif event is EngineEvent.DROPPED:
            log.info("pull.buffer_forgotten", queue=self.queue, detail=detail)
        else:
            log.warning(f"pull.{event.value}", queue=self.queue, detail=detail)


def warn_replicas_differ(stream: ReplicasDiffer) -> None:
    """Say, loudly, that a stream has fewer (or more) copies than the app is configured for: a
    stream with fewer loses work when a node does, and only an operator should move its data."""
    log.warning(
        "worker.replicas_differ",
        stream=stream.stream,
        replicas=stream.current,
        configured=stream.wanted,
        message=str(stream),
    )
