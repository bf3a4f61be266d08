"""The worker's running jobs: each runs in a task that holds one of the limiter's slots and
takes the job through the four stages of the pipeline (see :mod:`.pipeline`).

A task done with its job goes on with the job its slot would be given to next: the one
buffered for the pull loop that waits first for a slot (:meth:`.limiter.Limiter.hand_on`).
At full load a job then starts with no task of its own and no wake-up of its pull loop, both
measurable in a short job's cost (bench/README.md, "Hot-path choices"). Each job still runs
in the context its task's first job began with: after a job that set context variables, the
next one gets a task of its own, started in that context.

Below full load, the jobs that take free slots in one turn of the event loop (the messages of
one read from the socket) share the task started for the first of them (:meth:`Slots.start`):
it runs them one after the other while they finish without waiting. Their tasks would have
run in that order in the next turn anyway; what one waits for does not hold up the others,
which get tasks of their own as soon as it waits (:meth:`Slots._spread`).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections import deque
from collections.abc import Awaitable, Callable

from .._observability.logging import get_logger
from .execution import JobRun
from .limiter import Limiter
from .outcomes import Outcome, OutcomeKind, Settlement
from .pipeline import Verdict

log = get_logger("jsworker.worker")

_Settled = Settlement | Awaitable[Settlement]


class Slots:
    """Starts and runs the jobs of one worker: :meth:`start` a job that took a slot; the
    stages are the pipeline's (``admit``, ``run``, ``settle``, ``after``). ``jobs`` holds
    every job running (or about to) and its task until it has settled; ``on_start``, when
    given, is told of each job started."""

    def __init__(
        self,
        limiter: Limiter[JobRun],
        jobs: dict[JobRun, asyncio.Task[None]],
        stages: tuple[
            Callable[[JobRun], Verdict],
            Callable[[JobRun], Awaitable[Outcome]],
            Callable[[JobRun, Outcome], _Settled],
            Callable[[JobRun, Settlement], Awaitable[None] | None],
        ],
        on_start: Callable[[], None] | None,
    ) -> None:
        self.limiter = limiter
        self.jobs = jobs
        self._admit, self._run, self._settle, self._after = stages
        self._on_start = on_start
        #: Set while the worker cancels what still runs past its grace period: a job
        #: interrupted then settles as given back, and its task takes on no other.
        self.cancelling = False
        loop = asyncio.get_running_loop()
        # The loop's own method, looked up once: asyncio.create_task is a wrapper around it.
        self._create_task = loop.create_task
        self._call_soon = loop.call_soon
        # Jobs that took a slot while the task started for an earlier one had not run yet:
        # that task runs them after its own (each with its own slot), or _spread starts them.
        self._arrivals: deque[JobRun] = deque()
        self._unstarted = False  # a task of start() has not taken its first step

    def start(self, job: JobRun) -> None:
        """Run ``job``, which holds a slot: after the job of a task started here that has not
        run yet, else in a task of its own."""
        if not self._unstarted:
            self._unstarted = True
            self.spawn(job)
            return
        if not self._arrivals:
            # Runs after that task's first step: whatever it did not take (its job waited,
            # or changed the context) gets a task of its own then.
            self._call_soon(self._spread)
        self._arrivals.append(job)

    def waiting(self) -> tuple[JobRun, ...]:
        """The jobs given a slot that no task runs yet: to the worker, still buffered."""
        return tuple(self._arrivals)

    def _spread(self) -> None:
        self._unstarted = False
        arrivals = self._arrivals
        while arrivals:
            self.spawn(arrivals.popleft())

    def spawn(self, job: JobRun, context: contextvars.Context | None = None) -> None:
        """Run ``job``, which holds a slot, in a task of its own (in ``context``, else a copy
        of the caller's)."""
        # A task of the loop's own, not of an anyio task group, which costs several times as
        # much per job (bench/README.md, "Hot-path choices"). The worker keeps the structure
        # itself: jobs holds every task until it has settled, and the worker's stop waits
        # for, cancels and hands back what is left.
        self.jobs[job] = self._create_task(self._running(job), context=context)
        if self._on_start is not None:
            self._on_start()

    async def _running(self, job: JobRun) -> None:
        # The four stages in one coroutine, its clean-up included (no done callback): each
        # layer and each event-loop turn shows in a short job's cost.
        task = self.jobs[job]  # registered by spawn before this first step
        self._unstarted = False
        context = contextvars.copy_context()
        handed_on = False  # the slot went to a task of its own
        try:
            while True:
                interrupted = False
                try:
                    job.started = time.monotonic()
                    try:
                        # Awaited only when a check needs the server: most jobs pass without
                        # a round trip.
                        outcome = self._admit(job)
                        if outcome is not None and not isinstance(outcome, Outcome):
                            outcome = await outcome
                        if outcome is None:
                            outcome = await self._run(job)
                    except asyncio.CancelledError:
                        if not (self.cancelling or job.cancel_requested):
                            raise
                        interrupted = True
                        outcome = _interrupted()
                    settled = self._settle(job, outcome)
                    settlement = settled if isinstance(settled, Settlement) else await settled
                    after = self._after(job, settlement)
                    if after is not None:
                        await after
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.error("job.internal_error", error=repr(exc), **job.log_fields())
                finally:
                    self.jobs.pop(job, None)
                following, handed_on = self._take_on(task, context, interrupted)
                if following is None:
                    return
                job = following
        finally:
            if not handed_on:
                self.limiter.release()

    def _take_on(
        self, task: asyncio.Task[None], context: contextvars.Context, interrupted: bool
    ) -> tuple[JobRun | None, bool]:
        """For ``task``, done with its job: the job it runs next (None: it ends), and whether
        the slot went to a task of its own instead (for a job after one that changed
        ``context``, the one the task began with)."""
        if interrupted or self.cancelling:
            # A task whose job was cancelled ends with it: no later job inherits what is left
            # of its cancellation.
            return None, False
        job: JobRun | None
        if self._arrivals:
            job = self._arrivals.popleft()
            # It came with a slot of its own: the task's goes to the first waiter's next job,
            # run after the others here (released to the waiter only when it has none), so
            # that the waiter is not woken to start a task for it.
            claimed = self.limiter.pass_on()
            if claimed is not None:
                self._arrivals.append(claimed)
        else:
            job = self.limiter.hand_on()
            if job is None:
                return None, False
        if contextvars.copy_context() != context:
            self.spawn(job, context)
            return None, True
        self.jobs[job] = task
        if self._on_start is not None:
            self._on_start()
        return job, False


def _interrupted() -> Outcome:
    """The outcome of a run this worker cancelled (stopping, or a cancel of the job): the
    task's cancellation is taken back, so that settling it can go on."""
    current = asyncio.current_task()
    if current is not None:
        current.uncancel()
    return Outcome(OutcomeKind.CANCELLED, "worker shut down before the job finished")
