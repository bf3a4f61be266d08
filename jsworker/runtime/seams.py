"""The seams of a job's run in the worker, filled by the features that are on.

A run goes: the job's own checks (task, body, arguments, crashes), then each **gate** (may
it start: a fired job's claim, a cancel or an expiry, a task's rate limit, its partition's
lease), then each **start step** (the ``started`` event), then the **call** (the task, inside
the app's ``around_run`` middleware, and a workflow step's continuation), then the
settlement (with the **final steps** before a final outcome is sent: a workflow's end), then
each **end step** (events, ``on_settled`` middleware, a partition lease given back). Features
may also run **services** beside the pull loops (lease renewals). A feature that is off
contributes nothing, so its cost is not paid per job.

The start and stop hooks of the app (``@app.on_startup``, ``@app.on_shutdown``) run here too.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import JsworkerError, StartupError
from ..job import running_job
from ..middleware import MiddlewareChain, Settled, SettledState
from ..observability.logging import get_logger
from .execution import Executor, JobRun, raised
from .flows import FinalStep
from .schedules import CANCELLED_AS_FIRED
from .settlement import Decision, Outcome, OutcomeKind, Verb

if TYPE_CHECKING:
    from ..app import App

log = get_logger("jsworker.worker")

#: Why a job may not start (an outcome that settles it), or None; an awaitable of either
#: when finding out takes the server.
Verdict = Outcome | Awaitable[Outcome | None] | None
#: A check before a run.
Gate = Callable[[JobRun], Verdict]
StartStep = Callable[[JobRun], Awaitable[None]]
EndStep = Callable[[JobRun, Outcome, Decision, float], Awaitable[None]]


@dataclass(slots=True)
class RunSeams:
    """What the worker does around each job, besides the job's own checks and settlement."""

    call: Callable[[JobRun], Awaitable[Outcome]]
    gates: list[Gate] = field(default_factory=list)
    starts: list[StartStep] = field(default_factory=list)
    ends: list[EndStep] = field(default_factory=list)
    #: Steps before a final outcome (not a success, not a retry) is sent to the server.
    finals: list[FinalStep] = field(default_factory=list)
    #: What the features run beside the pull loops for as long as the worker runs.
    services: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    def admission(
        self,
        executor: Executor,
        recheck: Callable[[JobRun], Awaitable[None]],
        left: Callable[[JobRun], Awaitable[Outcome | None]],
    ) -> Admission:
        """The check before each run: the job's own, then the gates."""
        return Admission(executor, tuple(self.gates), recheck, left)

    def runner(self) -> Callable[[JobRun], Awaitable[Outcome]]:
        """The start steps, then the call (the call alone when there are none)."""
        if not self.starts:
            return self.call
        starts, call = tuple(self.starts), self.call

        async def run(job: JobRun) -> Outcome:
            for start in starts:
                await start(job)
            return await call(job)

        return run

    async def after(self, job: JobRun, outcome: Outcome, decision: Decision, duration: float) -> None:
        """Run the end steps, once the server was told (a kept result's ack included)."""
        if job.acked is not None and outcome.kind is OutcomeKind.SUCCEEDED:
            await job.acked
        for end in self.ends:
            await end(job, outcome, decision, duration)


class Admission:
    """Whether a job may start: its own checks (:meth:`Executor.check`), then each gate.

    A plain call, not a coroutine, for the jobs that need no round trip to decide (nearly
    all): it returns an awaitable only once a check must ask the server.
    """

    def __init__(
        self,
        executor: Executor,
        gates: tuple[Gate, ...],
        recheck: Callable[[JobRun], Awaitable[None]],
        left: Callable[[JobRun], Awaitable[Outcome | None]],
    ) -> None:
        self._check = executor.check
        self._gates = gates
        self._recheck = recheck
        self._left = left

    def __call__(self, job: JobRun) -> Verdict:
        """None when ``job`` may start, else the outcome that settles it (or an awaitable)."""
        outcome = self._check(job)
        if outcome is not None:
            return self._again(job) if outcome.kind is OutcomeKind.POISON else outcome
        return self._from(job, 0)

    def _from(self, job: JobRun, first: int) -> Verdict:
        gates = self._gates
        for i in range(first, len(gates)):
            verdict = gates[i](job)
            if verdict is not None:
                return verdict if isinstance(verdict, Outcome) else self._then(job, verdict, i + 1)
        return None

    async def _then(self, job: JobRun, pending: Awaitable[Outcome | None], rest: int) -> Outcome | None:
        outcome = await pending
        return outcome if outcome is not None else await _resolved(self._from(job, rest))

    async def _again(self, job: JobRun) -> Outcome | None:
        # Runs given back by stopping workers, or that failed on their own, did not kill it:
        # checked again without those. Deliveries that live workers still hold did not either
        # (see .holders): one of those left, this delivery is theirs to settle.
        await self._recheck(job)
        outcome = self._check(job)
        if outcome is not None and outcome.kind is OutcomeKind.POISON:
            outcome = await self._left(job) or outcome
        return outcome if outcome is not None else await _resolved(self._from(job, 0))


async def _resolved(verdict: Verdict) -> Outcome | None:
    return verdict if verdict is None or isinstance(verdict, Outcome) else await verdict


async def _call_hook(hook: Callable[[], Any]) -> None:
    result = hook()
    if inspect.isawaitable(result):
        await result


async def run_startup(app: App) -> None:
    """Run the app's start hooks in the order they were declared; the first that raises
    stops the worker with :class:`StartupError` (the later ones do not run)."""
    for hook in app.hooks.startup:
        try:
            await _call_hook(hook)
        except Exception as exc:
            name = getattr(hook, "__qualname__", repr(hook))
            raise StartupError(f"start hook {name} failed: {type(exc).__name__}: {exc}") from exc


async def run_shutdown(app: App) -> None:
    """Run the app's stop hooks in the order they were declared; one that raises is logged
    and the others still run."""
    for hook in app.hooks.shutdown:
        try:
            await _call_hook(hook)
        except Exception as exc:
            log.error(
                "worker.shutdown_hook_failed", hook=getattr(hook, "__qualname__", repr(hook)), error=repr(exc)
            )


def wrapped_call(executor: Executor, middleware: MiddlewareChain) -> Callable[[JobRun], Awaitable[Outcome]]:
    """The executor's call inside the app's ``around_run`` middleware (the plain call when
    no middleware has one)."""
    if not middleware.wraps:
        return executor.call

    async def call(job: JobRun) -> Outcome:
        ran: Outcome | None = None

        async def innermost() -> Any:
            nonlocal ran
            ran = await executor.call(job)
            if ran.kind is OutcomeKind.SUCCEEDED:
                return ran.value
            # The middleware sees what the task raised; below, its outcome stays as it was
            # classified unless a middleware raised something else.
            raise ran.error if ran.error is not None else JsworkerError(ran.reason)

        token = running_job.set(job.context)
        try:
            value = await middleware.run(job.context(), innermost)
        except (Exception, SystemExit) as exc:
            if ran is not None and exc is ran.error:
                return ran
            return raised(exc, job.task)
        finally:
            running_job.reset(token)
        if ran is not None and ran.kind is OutcomeKind.SUCCEEDED and value is ran.value:
            return ran
        return Outcome(OutcomeKind.SUCCEEDED, value=value)

    return call


def settled_of(outcome: Outcome, decision: Decision, duration: float) -> Settled | None:
    """What ``on_settled`` is told of a delivery, or None for one that was not this job's to
    end (a second copy of a firing, a unique task's tick while its key is held, a delivery
    left to the worker that holds an earlier one)."""
    kind = outcome.kind
    state: SettledState
    if kind is OutcomeKind.SUCCEEDED:
        return Settled("succeeded", value=outcome.value, duration=duration)
    if kind is OutcomeKind.LEFT:
        return None
    if kind is OutcomeKind.SKIPPED:
        if outcome.reason != CANCELLED_AS_FIRED:
            return None
        state = "cancelled"
    elif kind is OutcomeKind.ABORTED:
        state = "cancelled"
    elif kind is OutcomeKind.EXPIRED:
        state = "expired"
    elif kind is OutcomeKind.CANCELLED:
        state = "handed_back"
    elif kind is OutcomeKind.SNOOZED:
        return Settled("snoozed", outcome.reason, None, None, decision.delay, duration)
    elif decision.verb is Verb.NAK:
        return Settled(
            "retrying", decision.reason or outcome.reason, outcome.error, None, decision.delay, duration
        )
    else:
        state = "failed"
    return Settled(state, decision.reason or outcome.reason, outcome.error, None, None, duration)


def settled_step(middleware: MiddlewareChain) -> EndStep:
    """The end step that tells the app's ``on_settled`` middleware how a delivery ended."""

    async def step(job: JobRun, outcome: Outcome, decision: Decision, duration: float) -> None:
        settled = settled_of(outcome, decision, duration)
        if settled is not None:
            await middleware.settled(job.context(), settled)

    return step
