"""What the worker tells operators about jobs and the pull loop: log events and metrics.

Kept apart from the worker so the worker reads as control flow; everything here is a
side-channel that must never change a job's fate.
"""

from __future__ import annotations

from collections import Counter

from .._observability.logging import get_logger
from .._observability.metrics import Metrics
from ..jetstream.consume import EngineEvent
from ..jetstream.topology import ReplicasDiffer

log = get_logger("jsworker.worker")


class PullObserver:
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
        elif event is EngineEvent.VOIDED:
            log.info("pull.requests_voided", queue=self.queue, detail=detail)
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
