"""Running one delivered job: find its task, decode it, call it, and classify what happened."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .._core.serializers import decode_call
from .._enqueue.receipt import JobContext, running_job
from .._errors import JobTimeout, Reject, Retry, SerializationError, Snooze, TaskControl
from .._observability.logging import get_logger
from .._observability.metrics import UNKNOWN
from .._scheduling.firing import Firing, firing
from .._wire.headers import ENQUEUED_AT, FIRED_BY, JOB_ID, MSG_ID, QUEUE, SCHEDULE, TASK
from ..workflows._definition import FLOW_STEP
from ..workflows._errbacks import celery_failure
from .outcomes import Outcome, OutcomeKind, crashed_too_often
from .process_pool import ProcessRunner
from .processes import (
    ProcessExited,
    ResultError,
    TaskProcessError,
    check_findable,
    process_call,
)
from .recycling import Recycling
from .threads import ThreadRunner

log = get_logger("jsworker.worker")

if TYPE_CHECKING:
    from .._app import App
    from .._enqueue.task import Task
    from .._limits.partitions import Lease
    from ..jetstream.delivery import Delivery


@dataclass(slots=True, eq=False)
class JobRun:
    """A delivery as the runtime sees it: identity, task (if known) and decoded arguments.

    Compared by identity, so the worker can key its running jobs by them.
    """

    delivery: Delivery
    job_id: str
    task_name: str
    queue: str
    task: Task[Any, Any] | None = None
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: Set for a job a schedule fired (a delayed job or a tick): its identity and due time.
    fired: Firing | None = None
    #: Set when a cancel of this job reaches the worker running it.
    cancel_requested: bool = False
    #: When the worker took the job up (``time.monotonic()``), 0.0 before.
    started: float = 0.0
    #: Deliveries of this job that stopping workers gave back unfinished, once read (see
    #: :mod:`.handbacks`): not held against its attempts.
    handed_back: int = 0
    #: The task's own failures in earlier runs, once read from the job's record (None: not
    #: read; a first delivery has none): what ``max_retries`` counts.
    failures: int | None = None
    #: The partition lease it holds while it runs, if its task has one (see
    #: :mod:`jsworker._limits.partitions`).
    lease: Lease | None = None
    #: The latest ``set_progress`` of its run: (fraction, message), None before any.
    progress: tuple[float, str | None] | None = None
    #: Runs of the job its task ended with ``Snooze``, once read with :attr:`failures`.
    snoozes: int = 0
    #: Resolved once a kept result is stored and the job acked, for steps that must come
    #: after the ack (``on_settled`` middleware); None when nothing waits for it.
    acked: asyncio.Future[None] | None = None
    #: The job stream partition it was delivered from (see :meth:`Namespace.partition_stream`).
    stream_partition: int = 0
    _context: JobContext | None = None

    @property
    def place(self) -> tuple[int, int]:
        """Its message's place on the server: (partition, stream sequence)."""
        return self.stream_partition, self.delivery.stream_seq

    @property
    def attempt(self) -> int:
        """Delivery count from the server (1 on the first delivery)."""
        return self.delivery.attempt

    @property
    def task_label(self) -> str:
        """Its task's name where a metric's label or a subject's token names it: ``unknown``
        for an undeclared task, whose name (perhaps hostile) must not become either."""
        return self.task_name if self.task is not None else UNKNOWN

    @property
    def due_at(self) -> float | None:
        """For a fired job, when it was due (unix seconds); None for any other job.

        A tick the server fires to catch up after an outage carries, as its identity, the
        slot the server counts the cadence from: the firing time rounded to the nearest second,
        up to half a second *after* it fired. Such a tick is dated when the server stored it,
        so that no job ever starts before its ``scheduled_for``; its id and claim keep the
        identity, which every copy of the firing agrees on.
        """
        if self.fired is None:
            return None
        due = self.fired.due_ms / 1000
        stored = self.delivery.stored_at
        return stored if stored is not None and stored < due else due

    @property
    def enqueued_at(self) -> float | None:
        """When the producer enqueued the job (epoch seconds), if its headers say so; for a
        fired job, when it was due: its time in the queue starts then."""
        if self.fired is not None:
            return self.due_at
        raw = self.delivery.headers.get(ENQUEUED_AT)
        try:
            return int(raw) / 1e9 if raw else None
        except ValueError:
            return None

    def log_fields(self) -> dict[str, Any]:
        """The fields that name the job in the worker's own log events."""
        return {"job_id": self.job_id, "task": self.task_name, "queue": self.queue, "attempt": self.attempt}

    def context(self) -> JobContext:
        """What :func:`~jsworker.current_job` returns for this job, built on first use."""
        ctx = self._context
        if ctx is None:
            # A job of an unknown task never runs, but middleware hears how it ended.
            ctx = self._context = JobContext(
                id=self.job_id,
                task=self.task_name,
                queue=self.queue,
                attempt=self.attempt,
                max_retries=self.task.options.max_retries if self.task is not None else 0,
                enqueued_at=self.enqueued_at,
                headers=self.delivery.headers,
                scheduled_for=None if (due := self.due_at) is None else datetime.fromtimestamp(due, UTC),
                seq=self.delivery.stream_seq,
                is_cancelled=self._is_cancelled,
                on_progress=self._progress,
            )
        return ctx

    def _is_cancelled(self) -> bool:
        return self.cancel_requested

    def _progress(self, fraction: float, message: str | None) -> None:
        # One tuple assigned: whole for a reader on the loop, even from a sync task's thread.
        self.progress = (fraction, message)


def as_job_run(app: App, queue: str, delivery: Delivery, partition: int = 0) -> JobRun:
    """Who a delivery of ``queue``'s ``partition`` is, even when its headers are missing or
    hostile."""
    headers = delivery.headers
    # A replayed dead letter carries a fresh dedup key but keeps its job id in Jsw-Job-Id.
    job_id = headers.get(JOB_ID) or headers.get(MSG_ID) or f"seq-{delivery.stream_seq}"
    name = headers.get(TASK)
    if name is None:
        parsed = app.namespace.parse_job_subject(delivery.subject)
        name = parsed[1] if parsed else ""
    if FIRED_BY in headers:
        # Every job marked as fired goes through the worker's checks of its firing, even one
        # whose headers do not say who it is.
        fired = firing(headers) or Firing(job_id, 0, "unbound")
        # A unique task's tick is known by its key's id, which its subject ends in (its
        # firing keeps the tick's own id, which makes it run once).
        keyed = delivery.subject.rsplit(".", 1)[-1] if delivery.subject.count(".") == 5 else None
        run_id = keyed if keyed is not None and fired.kind == "periodic" else fired.job_id
        job = JobRun(delivery, run_id, name, queue, app.tasks.get(name))
        job.fired = fired
    else:
        job = JobRun(delivery, job_id, name, queue, app.tasks.get(name))
    if partition:
        # Set afterwards: a keyword among this many parameters costs the call a quarter more.
        job.stream_partition = partition
    return job


class Executor:
    """Calls task functions: async ones on the loop, sync ones in a bounded thread pool, and
    those declared with ``executor="process"`` in a pool of up to ``processes`` processes
    (None: one per CPU), started on first need and replaced as ``recycling`` says.

    Raises ConfigurationError when a process task cannot be found by its function's name (see
    :func:`~jsworker._runtime.processes.check_findable`): the worker does not start then.
    """

    def __init__(
        self, app: App, threads: int, processes: int | None = None, recycling: Recycling | None = None
    ) -> None:
        self.app = app
        self.threads = ThreadRunner(threads)
        self.processes = ProcessRunner((os.cpu_count() or 1) if processes is None else processes, recycling)
        for task in app.tasks.values():
            if task.in_process:
                check_findable(task)

    async def run(self, job: JobRun) -> Outcome:
        """Check and run ``job``; its outcome. Never raises except for cancellation."""
        return self.check(job) or await self.call(job)

    def check(self, job: JobRun) -> Outcome | None:
        """Why ``job`` cannot run (unknown task, bad body or arguments, too many deliveries),
        or None when it can: then its arguments and context are set for :meth:`call`."""
        task = job.task
        if task is None:
            return Outcome(OutcomeKind.BAD_INPUT, f"unknown task {job.task_name!r} on queue {job.queue!r}")
        if SCHEDULE in job.delivery.headers:
            # A schedule published on a job subject: acked as a job it would run once, and
            # until then keep firing copies of itself. Ended here, it does neither.
            return Outcome(
                OutcomeKind.BAD_INPUT,
                "a schedule (Nats-Schedule header) on a job subject: jobs are enqueued as messages, "
                "delayed jobs on the delayed-job subjects",
            )
        if task.queue != job.queue and job.delivery.headers.get(QUEUE) != job.queue:
            # Neither its task's queue nor one its producer routed it to (apply(queue=...)):
            # only a hand-made message gets here.
            return Outcome(
                OutcomeKind.BAD_INPUT,
                f"task {task.name!r} belongs to queue {task.queue!r}, not {job.queue!r}",
            )
        max_crashes = task.options.max_crashes
        attempt = job.attempt
        # A first delivery follows no run that could have crashed.
        if attempt > 1 and crashed_too_often(
            attempt, job.handed_back, (job.failures or 0) + job.snoozes, max_crashes
        ):
            return Outcome(
                OutcomeKind.POISON,
                f"delivered {attempt} times, of which more than {max_crashes} (max_crashes) ended "
                "with no outcome: the job likely kills its worker",
            )
        try:
            args, kwargs = decode_call(self.app.serializer, job.delivery.body)
        except SerializationError as exc:
            return Outcome(OutcomeKind.BAD_INPUT, str(exc), error=exc)
        try:
            if task.celery_errback and job.delivery.headers.get(FLOW_STEP) == "err":
                args = celery_failure(args)
            task.check_arguments(args, kwargs)
            if task.typed is not None:
                typed_args, kwargs = task.typed.decode(args, kwargs)
                args = list(typed_args)
        except TypeError as exc:
            return Outcome(OutcomeKind.BAD_INPUT, f"bad arguments: {exc}", error=exc)
        job.args, job.kwargs = args, kwargs
        return None

    async def call(self, job: JobRun) -> Outcome:
        """Run a job that passed :meth:`check`; its outcome. Raises only on cancellation."""
        task, args, kwargs = job.task, job.args, job.kwargs
        assert task is not None
        if task.in_process:
            return await self._call_in_process(job, task)
        token = running_job.set(job.context)
        timeout = task.options.timeout
        scope: asyncio.Timeout | None = None
        thread: asyncio.Future[Any] | None = None
        try:
            if timeout is None:
                # Most tasks have no timeout: no timeout scope and no extra coroutine layer for
                # them, both measurable in a short job's cost (bench/README.md, "Hot-path
                # choices").
                if task.is_async:
                    value = await task.run(*args, **kwargs)
                else:
                    value = await self.threads.run(task.run, *args, **kwargs)
            elif task.is_async:
                async with asyncio.timeout(timeout) as scope:
                    value = await task.run(*args, **kwargs)
            else:
                # Shielded: a timeout must not drop the thread's call, see _outlive.
                thread = self.threads.submit(task.run, *args, **kwargs)
                async with asyncio.timeout(timeout) as scope:
                    value = await asyncio.shield(thread)
        except TimeoutError as exc:
            if scope is not None and scope.expired():
                if thread is not None:
                    await self._outlive(job, thread)
                return _timed_out(task, timeout, exc)
            return raised(exc, task)
        except (Exception, SystemExit) as exc:  # a sync task calling sys.exit() must not end the worker
            return raised(exc, task)
        finally:
            running_job.reset(token)
        return _SUCCEEDED if value is None else Outcome(OutcomeKind.SUCCEEDED, value=value)

    async def _call_in_process(self, job: JobRun, task: Task[Any, Any]) -> Outcome:
        """Run a process task's job in the process pool: the body crosses as the serializer
        encoded it, and the outcome is classified as a thread run's would be."""
        timeout = task.options.timeout
        content_type = self.app.serializer.content_type
        call = process_call(task, job.context(), job.delivery.body, content_type)
        try:
            value = await self.processes.run(call, timeout, self.app.serializer, owner=job)
        except TaskControl as exc:  # Retry, Snooze, Reject: raised again here by the pool
            return raised(exc, task)
        except TimeoutError as exc:  # the pool's clock: a task's own TimeoutError is a TaskProcessError
            return _timed_out(task, timeout, exc)
        except ResultError as exc:
            return Outcome(OutcomeKind.FAILED, exc.reason, error=exc, retryable=False)
        except TaskProcessError as exc:
            return failed(exc, exc.retryable)
        except ProcessExited as exc:
            # As for a worker that dies under a job: tried again while attempts are left.
            return failed(exc, True)
        return _SUCCEEDED if value is None else Outcome(OutcomeKind.SUCCEEDED, value=value)

    async def _outlive(self, job: JobRun, thread: asyncio.Future[Any]) -> None:
        """Wait for a timed-out sync call's thread to return.

        Python cannot stop a thread, so the job is not handed back for its next attempt while
        its call still runs: two runs of one job would have their side effects at once. The
        job keeps its slot and its heartbeats meanwhile (the worker still holds it). Only a
        shutdown past its grace period stops the wait; the process then ends with the thread.
        """
        if thread.done():
            return
        started = time.monotonic()
        log.warning(
            "job.sync_overrun", timeout=job.task.options.timeout if job.task else None, **job.log_fields()
        )
        self.app.metrics.sync_overruns.labels(job.queue, job.task_name).inc()
        await asyncio.wait([thread])
        if not thread.cancelled():
            thread.exception()  # the attempt already timed out: what it raised is only retrieved
        log.warning(
            "job.sync_overrun_ended", overrun=round(time.monotonic() - started, 3), **job.log_fields()
        )

    def close(self) -> None:
        """Release the thread pool (calls still running finish on their own) and end the
        task processes."""
        self.threads.close()
        self.processes.close()


_SUCCEEDED = Outcome(OutcomeKind.SUCCEEDED)


def _timed_out(task: Task[Any, Any], timeout: float | None, cause: BaseException) -> Outcome:
    # A timeout is a JobTimeout, retried or not as the task's retry_on/dont_retry_on say.
    error = JobTimeout(f"timed out after {timeout}s")
    error.__cause__ = cause
    return Outcome(OutcomeKind.TIMED_OUT, str(error), error=error, retryable=task.options.is_retryable(error))


def raised(exc: BaseException, task: Task[Any, Any] | None) -> Outcome:
    """The outcome of what a job's run raised (the task, or middleware around it): ``Retry``,
    ``Snooze`` and ``Reject`` say so themselves; anything else is a failure, retried or not
    as ``task``'s ``retry_on``/``dont_retry_on`` say (retried for an unknown task)."""
    if isinstance(exc, TaskControl):
        if isinstance(exc, Retry):
            return Outcome(OutcomeKind.RETRY, exc.reason, error=exc, retry_delay=exc.delay)
        if isinstance(exc, Snooze):
            return Outcome(OutcomeKind.SNOOZED, exc.reason, error=exc, retry_delay=exc.delay)
        if isinstance(exc, Reject):
            return Outcome(OutcomeKind.REJECTED, exc.reason, error=exc)
    return failed(exc, task.options.is_retryable(exc) if task is not None else True)


def failed(exc: BaseException, retryable: bool) -> Outcome:
    """The outcome of a run that raised ``exc`` (retried while attempts are left if ``retryable``)."""
    return Outcome(OutcomeKind.FAILED, f"{type(exc).__name__}: {exc}", error=exc, retryable=retryable)
