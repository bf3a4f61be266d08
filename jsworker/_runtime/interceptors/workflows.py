"""Workflows in the worker (``App(workflows=True)``): a job claiming to be a workflow's step
is checked before it runs (``admit``), and dead-lettered when the workflow did not store it
there (see :mod:`jsworker.workflows._trust`); a step's continuation runs before the server is
told the step ended (``around_run``), and a workflow whose step ended for good is ended
before the job's final verb (``before_final``; see :mod:`jsworker.workflows._advance`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from ..._errors import JsworkerError
from ..._observability.logging import get_logger
from ...workflows._advance import Continuations
from ...workflows._definition import FLOW
from ...workflows._trust import ForgedStep
from ..execution import JobRun
from ..outcomes import Outcome, OutcomeKind, Settlement, Verb
from ..pipeline import CallNext, Interceptor

log = get_logger("jsworker.workflows")

T = TypeVar("T")

# Seconds a step keeps trying to read or store its workflow while the server does not
# answer; a leader election takes a few.
_PATIENCE = 30.0

_FINAL_STATES = {
    OutcomeKind.ABORTED: "cancelled",
    OutcomeKind.EXPIRED: "expired",
}


class Workflows(Interceptor):
    """A workflow step is the step it claims to be, and its workflow goes on once it ends."""

    name = "workflows"

    def __init__(self, flows: Continuations) -> None:
        self._flows = flows

    def admit(self, job: JobRun) -> Awaitable[Outcome | None] | None:
        """Dead-letters a job claiming a workflow step it is not (a bad input: it never runs,
        and never advances the workflow)."""
        return _checked(self._flows, job) if FLOW in job.delivery.headers else None

    async def around_run(self, job: JobRun, call_next: CallNext) -> Outcome:
        """The run, then, for a workflow's step that succeeded, what comes next."""
        outcome = await call_next()
        headers = job.delivery.headers
        if outcome.kind is OutcomeKind.SUCCEEDED and FLOW in headers:
            return await _continued(self._flows, headers, outcome, _sent_on(job, outcome.value))
        return outcome

    async def before_final(self, job: JobRun, settlement: Settlement) -> bool:
        """Ends the workflow whose step failed for good, was cancelled or expired."""
        headers = job.delivery.headers
        if FLOW not in headers:
            return True
        outcome, decision = settlement.outcome, settlement.decision
        state = "failed" if decision.verb is Verb.DEAD_LETTER else _FINAL_STATES.get(outcome.kind)
        if state is None or isinstance(outcome.error, ForgedStep):
            return True
        flows = self._flows
        try:
            # Checked again: its own checks, a cancel or an expiry may have ended it before
            # admit looked (a rare path: the ends that are no success).
            if await _forged(flows, job) is not None:
                return True
            await flows.ended(
                dict(headers), False, None, state, decision.reason or outcome.reason, outcome.error
            )
        except JsworkerError as exc:
            log.error("workflow.end_not_recorded", error=str(exc), **job.log_fields())
            return False
        return True


async def _checked(flows: Continuations, job: JobRun) -> Outcome | None:
    """None for a job that is the step it claims to be, else the outcome that ends it (or,
    the server not answering, gives it back: see :func:`_patiently`)."""
    try:
        reason = await _patiently(lambda: _forged(flows, job))
    except JsworkerError as exc:
        return _not_now(f"could not check its workflow: {exc}", exc)
    if reason is None:
        return None
    return Outcome(OutcomeKind.BAD_INPUT, f"forged workflow step: {reason}", error=ForgedStep(reason))


async def _patiently(attempt: Callable[[], Awaitable[T]]) -> T:
    """``attempt()``, tried again while the server does not answer (a stream electing its
    leader), for :data:`_PATIENCE` seconds, while the worker holds the job; then its error."""
    pause, deadline = 0.1, time.monotonic() + _PATIENCE
    while True:
        try:
            return await attempt()
        except JsworkerError as exc:
            if not getattr(exc, "transient", False) or time.monotonic() + pause >= deadline:
                raise
        await asyncio.sleep(pause)
        pause = min(2 * pause, 2.0)


def _not_now(reason: str, exc: JsworkerError) -> Outcome:
    """The outcome of a step whose workflow the server would not read or write: given back
    to run again later without spending an attempt when the server did not answer (its
    outage is not the task's failure), a failure when it refused."""
    if getattr(exc, "transient", False):
        return Outcome(OutcomeKind.SNOOZED, reason, error=exc, retry_delay=_PATIENCE)
    return Outcome(OutcomeKind.FAILED, reason, error=exc)


def _forged(flows: Continuations, job: JobRun) -> Awaitable[str | None]:
    d = job.delivery
    return flows.forged(d.headers, job.job_id, d.stream_seq, job.fired is not None)


def _sent_on(job: JobRun, value: Any) -> Any:
    """A step's return value as what follows it gets it: JSON-ready when its task's return
    annotation is typed (a Decimal, a dataclass), so the next step's own annotation rebuilds
    it. One that cannot be made so goes as it is, and fails the workflow saying why."""
    typed = job.task.typed_result if job.task is not None else None
    if typed is None:
        return value
    try:
        return typed.encode(value)
    except TypeError:
        return value


async def _continued(
    flows: Continuations, headers: Mapping[str, str], outcome: Outcome, value: Any
) -> Outcome:
    """``outcome`` once what follows the step (given ``value``) is stored (see :func:`_patiently`)."""
    try:
        await _patiently(lambda: flows.ended(dict(headers), True, value, "succeeded", "", None))
    except JsworkerError as exc:
        # Not recorded: the step runs again later, and its next step is enqueued then.
        return _not_now(f"could not enqueue what follows it: {exc}", exc)
    return outcome
