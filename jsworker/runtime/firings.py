"""The worker's hook for jobs a schedule fired: claim the firing before the job runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import JsworkerError
from ..observability.logging import get_logger
from ..observability.metrics import UNKNOWN
from ..scheduling.claims import CANCELLED, claim
from .settlement import Outcome, OutcomeKind

if TYPE_CHECKING:
    from ..app import App
    from ..jetstream.connection import Connection
    from .execution import JobRun

log = get_logger("jsworker.worker")


class FiredJobs:
    """Lets one copy of each firing run (see :mod:`jsworker.scheduling.claims`).

    Called only for jobs that carry the server's ``Nats-Scheduler`` header, after the job's
    own checks passed: other jobs pay nothing for it, fired ones one round trip.
    """

    def __init__(self, app: App, conn: Connection) -> None:
        self.app = app
        self.conn = conn

    async def admit(self, job: JobRun) -> Outcome | None:
        """None when ``job`` may run; an outcome that skips it when it is a second copy of
        its firing or was cancelled."""
        fired = job.fired
        assert fired is not None
        task = job.task_name if job.task is not None else UNKNOWN
        try:
            held = await claim(
                self.conn, self.app.namespace, fired.job_id, fired.due_ms, str(job.delivery.stream_seq)
            )
        except JsworkerError as exc:
            # Never lose a job to bookkeeping: without a claim it runs, at least once as any job.
            log.warning("job.claim_failed", error=str(exc), **job.log_fields())
            return None
        if held is None:
            if job.attempt == 1:
                self.app.metrics.fired.labels(job.queue, task, fired.kind).inc()
            return None
        reason = "cancelled" if held == CANCELLED else "duplicate"
        self.app.metrics.fired_dropped.labels(job.queue, task, reason).inc()
        log.info("job.fired_dropped", reason=reason, claimed_by_seq=held, **job.log_fields())
        if reason == "cancelled":
            return Outcome(OutcomeKind.SKIPPED, "cancelled as it fired")
        return Outcome(OutcomeKind.SKIPPED, f"a second copy of a firing (message {held} runs it)")
