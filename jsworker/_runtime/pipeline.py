"""A job's way through the worker, in four stages, each a step of the task that runs it
(:mod:`.slots`):

1. **admit** (:meth:`Pipeline.admit`): the job's own checks (its task, body and arguments,
   whether it kills its workers: :class:`Admission`), then each interceptor's ``admit``: may
   it start now? An outcome instead settles it unstarted.
2. **run** (:meth:`Pipeline.run`): the task's call inside each interceptor's ``around_run``,
   the first outermost.
3. **settle** (:class:`~jsworker._runtime.settle.Settle`): the decision, what the server is
   told and the job's record, with each interceptor's ``before_final`` before a final
   outcome (no success, no retry) is sent; the result is one :class:`Settlement`.
4. **after** (:meth:`Pipeline.after`): each interceptor's ``after_settled``, once the server
   was told.

The stages that may need the server (admit, settle, after) are plain calls that return an
awaitable only when they must wait: most jobs pass admit and settle without a round trip and
without a coroutine of their own (bench/README.md, "Hot-path choices").

Every per-job concern is an :class:`Interceptor`; :func:`jsworker._runtime.interceptors.assemble`
lists them, in this order, with the app's middleware last. Only the hooks an interceptor has
are gathered, once, when the worker starts: a feature that is off is not in the list, and one
that is on costs only its own hooks. The start and stop hooks of the app
(``@app.on_startup``, ``@app.on_shutdown``) run here too.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast

from .._errors import StartupError
from .._observability.logging import get_logger
from .execution import JobRun
from .outcomes import Outcome, OutcomeKind, Settlement

if TYPE_CHECKING:
    from .._app import App

log = get_logger("jsworker.worker")

#: The stages of a job's way through the worker, in order.
STAGES = ("admit", "run", "settle", "after")

#: Why a job may not start (an outcome that settles it), or None; an awaitable of either
#: when finding out takes the server.
Verdict = Outcome | Awaitable[Outcome | None] | None
#: The rest of a run, from an ``around_run`` hook's place inward.
CallNext = Callable[[], Awaitable[Outcome]]
Around = Callable[[JobRun, CallNext], Awaitable[Outcome]]
_Plain = Callable[[JobRun, Settlement], None]
_Waited = Callable[[JobRun, Settlement], Awaitable[None]]
#: What a feature runs beside the pull loops for as long as the worker runs.
Service = Callable[[], Awaitable[None]]

_HOOKS = ("admit", "around_run", "before_final", "after_settled")


class Interceptor:
    """One per-job concern of the worker: override the hooks it needs (each does nothing
    here), and list it in :func:`jsworker._runtime.interceptors.assemble`."""

    #: Its name in the pipeline's list (docs/project-layout.md).
    name: ClassVar[str] = ""
    #: Whether :meth:`after_settled` must wait until the server stored a kept result and the
    #: job was acknowledged (a hook that tells the app a job ended must); hooks that need not
    #: run first.
    after_ack: ClassVar[bool] = True

    def admit(self, job: JobRun) -> Verdict:
        """None when ``job`` may start as far as this concern goes; else the outcome that
        settles it unstarted. Return an awaitable only when the server must be asked: most
        jobs pass without a round trip."""
        return None

    async def around_run(self, job: JobRun, call_next: CallNext) -> Outcome:
        """Wrap the rest of the run (``await call_next()``); return its outcome, or another."""
        return await call_next()

    async def before_final(self, job: JobRun, settlement: Settlement) -> bool:
        """Before a final outcome is sent (a dead letter, a cancel's or an expiry's ack):
        False when what must come first could not be done (the job is then tried again
        later). ``settlement.duration`` is 0.0 here."""
        return True

    def after_settled(self, job: JobRun, settlement: Settlement) -> Awaitable[None] | None:
        """Once the server was told how this delivery ended. A plain method (one that only
        counts) is called as such, before the coroutine ones: no coroutine per job."""
        return None

    def services(self) -> Sequence[Service]:
        """What this concern runs beside the pull loops while the worker runs."""
        return ()

    def hooks(self) -> frozenset[str]:
        """The hooks it has: those its class overrides (an adapter may say fewer)."""
        cls = type(self)
        return frozenset(h for h in _HOOKS if getattr(cls, h) is not getattr(Interceptor, h))


class Pipeline:
    """The interceptors' hooks, gathered by stage in the order of ``interceptors``."""

    def __init__(
        self,
        interceptors: Sequence[Interceptor],
        call: Callable[[JobRun], Awaitable[Outcome]],
        check: Callable[[JobRun], Outcome | None],
        recheck: Callable[[JobRun], Awaitable[None]],
        left: Callable[[JobRun], Awaitable[Outcome | None]],
    ) -> None:
        """``call`` runs a job that passed ``check``, its own checks; ``recheck`` and ``left``
        look again at one that seems to kill its workers (see :class:`Admission`)."""
        self.interceptors = tuple(interceptors)
        has = [(i, i.hooks()) for i in self.interceptors]
        gates = tuple(i.admit for i, hooks in has if "admit" in hooks)
        #: The admit stage: the job's own checks, then each interceptor's.
        self.admit: Callable[[JobRun], Verdict] = Admission(check, gates, recheck, left)
        arounds = tuple(i.around_run for i, hooks in has if "around_run" in hooks)
        #: The run stage: the call inside the ``around_run`` hooks (the call alone without).
        self.run: Callable[[JobRun], Awaitable[Outcome]] = _wrapped(call, arounds) if arounds else call
        #: The ``before_final`` hooks, for the settle stage.
        self.finals = tuple(i.before_final for i, hooks in has if "before_final" in hooks)
        afters = [i for i, hooks in has if "after_settled" in hooks]
        waits = [i for i in afters if inspect.iscoroutinefunction(i.after_settled)]
        self._plain = tuple(cast(_Plain, i.after_settled) for i in afters if i not in waits)
        self._early = tuple(cast(_Waited, i.after_settled) for i in waits if not i.after_ack)
        self._late = tuple(cast(_Waited, i.after_settled) for i in waits if i.after_ack)
        #: Whether a kept result's job must say when it is acknowledged (``JobRun.acked``).
        self.waits_for_acks = bool(self._late)
        self.services = [s for i in self.interceptors for s in i.services()]

    def after(self, job: JobRun, settlement: Settlement) -> Awaitable[None] | None:
        """The after stage: the plain hooks at once; then, returned to be awaited when there
        are any, the coroutine hooks that need not wait for the ack and, once a kept result
        is stored and the job acknowledged, the others."""
        for plain in self._plain:
            plain(job, settlement)
        return self._waited(job, settlement) if self._early or self._late else None

    async def _waited(self, job: JobRun, settlement: Settlement) -> None:
        for early in self._early:
            await early(job, settlement)
        if self._late:
            if job.acked is not None and settlement.outcome.kind is OutcomeKind.SUCCEEDED:
                await job.acked
            for late in self._late:
                await late(job, settlement)


def _wrapped(
    call: Callable[[JobRun], Awaitable[Outcome]], arounds: tuple[Around, ...]
) -> Callable[[JobRun], Awaitable[Outcome]]:
    """``call`` inside ``arounds``, the first outermost."""

    def run(job: JobRun) -> Awaitable[Outcome]:
        inner: CallNext = functools.partial(call, job)
        for around in reversed(arounds):
            inner = functools.partial(around, job, inner)
        return inner()

    return run


class Admission:
    """Whether a job may start: its own checks (``check``), then each interceptor's ``admit``
    (``gates``).

    A plain call, not a coroutine, for the jobs that need no round trip to decide (nearly
    all): it returns an awaitable only once a check must ask the server.
    """

    def __init__(
        self,
        check: Callable[[JobRun], Outcome | None],
        gates: tuple[Callable[[JobRun], Verdict], ...],
        recheck: Callable[[JobRun], Awaitable[None]],
        left: Callable[[JobRun], Awaitable[Outcome | None]],
    ) -> None:
        self._check = check
        self._gates = gates
        self._recheck = recheck
        self._left = left

    def __call__(self, job: JobRun) -> Verdict:
        """None when ``job`` may start, else the outcome that settles it (or an awaitable)."""
        outcome = self._check(job)
        if outcome is not None:
            return self._rechecked(job) if outcome.kind is OutcomeKind.POISON else outcome
        return self._gates_from(job, 0)

    def _gates_from(self, job: JobRun, first: int) -> Verdict:
        gates = self._gates
        for i in range(first, len(gates)):
            verdict = gates[i](job)
            if verdict is not None:
                return verdict if isinstance(verdict, Outcome) else self._after_asking(job, verdict, i + 1)
        return None

    async def _after_asking(
        self, job: JobRun, pending: Awaitable[Outcome | None], rest: int
    ) -> Outcome | None:
        outcome = await pending
        return outcome if outcome is not None else await _resolved(self._gates_from(job, rest))

    async def _rechecked(self, job: JobRun) -> Outcome | None:
        # Runs given back by stopping workers, or that failed on their own, did not kill it:
        # checked again without those. Deliveries that live workers still hold did not either
        # (see .holders): one of those left, this delivery is theirs to settle.
        await self._recheck(job)
        outcome = self._check(job)
        if outcome is not None and outcome.kind is OutcomeKind.POISON:
            outcome = await self._left(job) or outcome
        return outcome if outcome is not None else await _resolved(self._gates_from(job, 0))


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
