"""The app's middleware in the worker: each :class:`~jsworker._core.middleware.Middleware` is one
interceptor, in the app's order (the first outermost). Its ``around_run`` wraps the rest of
the run as the task's value or error (what a middleware sees and returns is Python's, not an
:class:`~..outcomes.Outcome`); its ``on_settled`` hears how each delivery ended, once the
server was told. A middleware that overrides neither is not in the pipeline."""

from __future__ import annotations

from typing import Any

from ..._core.middleware import Middleware, Settled, SettledState, overrides
from ..._enqueue.receipt import running_job
from ..._errors import JsworkerError
from ..._observability.logging import get_logger
from ..execution import JobRun, raised
from ..outcomes import Outcome, OutcomeKind, Settlement, Verb
from ..pipeline import CallNext, Interceptor

log = get_logger("jsworker.middleware")

_STATES: dict[OutcomeKind, SettledState] = {
    OutcomeKind.ABORTED: "cancelled",
    OutcomeKind.EXPIRED: "expired",
    OutcomeKind.CANCELLED: "handed_back",
}


class AppMiddleware(Interceptor):
    """One of the app's middleware, as a stage of the pipeline."""

    name = "middleware"

    def __init__(self, middleware: Middleware) -> None:
        self.middleware = middleware

    def hooks(self) -> frozenset[str]:
        """``around_run`` and ``after_settled`` as far as the middleware overrides
        ``around_run`` and ``on_settled``."""
        m = self.middleware
        has = {"around_run": overrides(m, "around_run"), "after_settled": overrides(m, "on_settled")}
        return frozenset(hook for hook, present in has.items() if present)

    async def around_run(self, job: JobRun, call_next: CallNext) -> Outcome:
        """The middleware's ``around_run`` around the rest of the run: the rest's failure is
        raised to it as the task raised it, and its outcome stays as it was classified unless
        the middleware returned another value or raised something else."""
        ran: Outcome | None = None

        async def inner() -> Any:
            nonlocal ran
            ran = await call_next()
            if ran.kind is OutcomeKind.SUCCEEDED:
                return ran.value
            raise ran.error if ran.error is not None else JsworkerError(ran.reason)

        token = running_job.set(job.context)
        try:
            value = await self.middleware.around_run(job.context(), inner)
        except (Exception, SystemExit) as exc:
            if ran is not None and exc is ran.error:
                return ran
            return raised(exc, job.task)
        finally:
            running_job.reset(token)
        if ran is not None and ran.kind is OutcomeKind.SUCCEEDED and value is ran.value:
            return ran
        return Outcome(OutcomeKind.SUCCEEDED, value=value)

    async def after_settled(self, job: JobRun, settlement: Settlement) -> None:
        """Tell the middleware's ``on_settled`` how the delivery ended; what it raises is
        logged (settled already: the job cannot fail for it any more)."""
        settled = settled_of(settlement)
        if settled is None:
            return
        try:
            await self.middleware.on_settled(job.context(), settled)
        except Exception as exc:
            log.error(
                "middleware.on_settled_failed",
                job_id=job.job_id, task=job.task_name, state=settled.state, error=repr(exc), exc_info=exc,
            )  # fmt: skip


def settled_of(settlement: Settlement) -> Settled | None:
    """What ``on_settled`` is told of a delivery, or None for one that was not this job's to
    end (a second copy of a firing, a unique task's tick while its key is held, an expiry
    counted already, a delivery left to the worker that holds an earlier one)."""
    outcome, decision, duration = settlement.outcome, settlement.decision, settlement.duration
    kind = outcome.kind
    if kind is OutcomeKind.SUCCEEDED:
        return Settled("succeeded", value=outcome.value, duration=duration)
    if kind is OutcomeKind.LEFT or kind is OutcomeKind.SKIPPED:
        return None
    reason = decision.reason or outcome.reason
    state = _STATES.get(kind)
    if state is not None:
        return Settled(state, reason, outcome.error, None, None, duration)
    if kind is OutcomeKind.SNOOZED:
        return Settled("snoozed", outcome.reason, None, None, decision.delay, duration)
    if decision.verb is Verb.NAK:
        return Settled("retrying", reason, outcome.error, None, decision.delay, duration)
    return Settled("failed", reason, outcome.error, None, None, duration)
