"""The worker: pulls jobs from each queue, runs them under the limiter, settles them.

Life cycle: connect, create streams and consumers, start one pull loop per queue and the
services of :mod:`.upkeep` (heartbeats among them), then work until :meth:`Worker.stop`.
Stopping stops the pulling at once, gives buffered jobs back to the server (a retiring worker
runs them instead), waits up to ``grace`` seconds for running jobs, then cancels the rest and
gives those back too, so another worker can start them immediately.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from .._errors import JsworkerError
from .._observability.logging import get_logger
from ..jetstream.connection import Connection, ConnectOptions
from ..jetstream.consume import ConsumeError, PullConsumer
from ..jetstream.delivery import Delivery
from . import interceptors, startup, upkeep
from .announcer import WorkerAnnouncer
from .execution import Executor, JobRun, as_job_run
from .handbacks import HandBackCounts
from .holders import EarlierDeliveries
from .jobbook import JobBook
from .limiter import Limiter
from .observe import PullObserver
from .pipeline import Interceptor, Pipeline, run_shutdown, run_startup
from .questions import answer_control, answer_questions
from .settings import WorkerSettings
from .settle import Settle
from .slots import Slots

if TYPE_CHECKING:
    from .._app import App

log = get_logger("jsworker.worker")


class Worker:
    """Runs an app's jobs from the given queues until stopped."""

    def __init__(
        self,
        app: App,
        settings: WorkerSettings | None = None,
        *,
        job_budget: int | None = None,
        interceptors: Sequence[Interceptor] = (),
    ) -> None:
        """``interceptors``: per-job concerns of this worker's own, after the features' and
        before the app's middleware (see :mod:`.pipeline`)."""
        self.app = app
        self._extra = tuple(interceptors)
        self.settings = settings or WorkerSettings()
        #: Set once the worker has taken up its queues.
        self.started = asyncio.Event()
        #: Why the worker stopped by itself (``"jobs"``: it started ``job_budget`` jobs), or None.
        self.retired: str | None = None
        self._budget = job_budget
        self.counts: Counter[str] = Counter()
        self.conn: Connection | None = None
        self.queues: list[str] = []
        self._stop = asyncio.Event()
        # False once it stops or goes quiet: it starts no job it pulls after.
        self._taking = True
        #: Since when it takes no new job, asked to be quiet (see :meth:`quiet`).
        self.quiet_since: float | None = None
        self._quieting: asyncio.Task[None] | None = None
        self._grace = self.settings.grace
        self._grace_scope: anyio.CancelScope | None = None
        self._stop_now = False
        #: The pull loops, by queue and partition.
        self._consumers: dict[tuple[str, int], PullConsumer] = {}
        self._jobs: dict[JobRun, asyncio.Task[None]] = {}
        self._crash: BaseException | None = None

    # -- control --------------------------------------------------------------------------

    def stop(self, *, now: bool = False) -> None:
        """Begin a graceful stop; ``now`` ends the grace period at once, even one under way
        (running jobs are cancelled and handed back)."""
        if now:
            self._stop_now = True
            if self._grace_scope is not None:
                self._grace_scope.cancel()
        self._taking = False
        self._stop.set()

    def quiet(self) -> bool:
        """Take no new job: stop pulling, give back the jobs pulled and not started, let the
        running ones finish, and stay up, its registry entry saying so, until stopped (an
        operator's step before a deploy or to drain a machine). False when it was quiet or
        stopping already."""
        if not self._taking:
            return False
        self._taking = False
        self.quiet_since = time.time()
        for consumer in list(self._consumers.values()):
            consumer.stop_pulling()
        self._quieting = asyncio.get_running_loop().create_task(self._hand_back_buffered())
        self._registry.refresh_soon()
        log.info("worker.quiet", in_flight=self.in_flight)
        return True

    @property
    def in_flight(self) -> int:
        """Jobs running right now."""
        return len(self._jobs)

    async def run(self) -> None:
        """Work until :meth:`stop`; raises ConnectError when the servers cannot be reached.

        Its phases: choose the queues, connect, prepare the server, run the app's start
        hooks, assemble what each job goes through (:meth:`_assemble`), serve
        (:meth:`_serve`: pull loops and services until stopped), wind down."""
        app = self.app
        self.queues = startup.served_queues(app, self.settings)
        # The worker publishes acks to reply subjects from the server and otherwise only
        # subjects built from validated names, so the client need not check each one.
        options = dataclasses.replace(app.connect_options("worker"), check_subjects=False)
        self.conn = conn = self._records_conn = await Connection.open(options)
        hooked = False
        try:
            await startup.prepare(app, conn, self, self.queues, self.settings.schedules)
            # Before the first job, as jobs may need what they open (app.state).
            await run_startup(app)
            hooked = True
            await self._assemble(conn, options)
            await self._serve(conn)
            await self._registry.remove()
            for consumer in list(self._consumers.values()):
                await consumer.close()
            self._executor.close()
            await conn.flush()
        finally:
            if hooked:
                # After the last job settled; on a crash too, so that pools get closed.
                await run_shutdown(app)
            if self._records_conn is not conn:
                await self._records_conn.close()
            await conn.close()
        if self._crash is not None:
            raise self._crash
        log.info("worker.stopped", **dict(self.counts))

    async def _assemble(self, conn: Connection, options: ConnectOptions) -> None:
        """Make what each job goes through: the slots, the executor, the job book, the
        pipeline of the features that are on (see :mod:`.pipeline`) and its settle stage."""
        app, settings = self.app, self.settings
        self._limiter: Limiter[JobRun] = Limiter(settings.concurrency)
        self._executor = Executor(app, settings.threads, settings.task_processes, settings.recycling)
        self._records_conn = await startup.records_connection(app, conn, options, self.queues)
        self._book = book = JobBook(app, conn, self._jobs, self._records_conn, self._buffered)
        await book.start()
        self._handbacks = HandBackCounts(app, conn)
        limits = startup.rate_limiters(app, conn)
        self._rates = {k[2:]: v for k, v in limits.items() if k.startswith("q-")}
        self._rate_follower = startup.rate_follower(app, conn, self.queues, self._rates)
        pool = self._executor.processes
        self.pipeline = pipeline = Pipeline(
            interceptors.assemble(app, conn, book, limits, self.counts, pool, self._extra),
            self._executor.call,
            self._executor.check,
            functools.partial(startup.recheck, self._handbacks, book),
            EarlierDeliveries(conn, app.namespace, self._holding, book.finished).left,
        )
        settle = Settle(app, conn, book, self._handbacks, pipeline.finals)
        self._slots = Slots(
            self._limiter,
            self._jobs,
            (pipeline.admit, pipeline.run, settle, pipeline.after),
            None if self._budget is None else self._count_start,  # nothing to count without a budget
        )
        # A kept result's ack waits for its record: hooks that must follow the ack are told it.
        book.track_acks = pipeline.waits_for_acks
        self._services = [*pipeline.services, *startup.services(app, conn, self.queues)]
        self._registry = WorkerAnnouncer(app, conn, self)

    async def _serve(self, conn: Connection) -> None:
        """Run the pull loops and the worker's services until :meth:`stop`, then finish the
        jobs and stop them."""
        app, settings = self.app, self.settings
        answers = await answer_questions(app, conn)
        control = await answer_control(app, conn, self._registry.id, self)
        # Listed once it answers: a worker the registry shows can be asked what it is asked.
        await self._registry.start()
        # The pull loops and the worker's own services run in one task group; each job
        # runs in a task of its own, outside it (see .slots).
        async with anyio.create_task_group() as services:
            for queue in self.queues:
                for partition in range(app.queue_streams(queue)):
                    name = f"jsworker-queue-{queue}" + (f"-{partition}" if partition else "")
                    services.start_soon(self._supervised, self._queue_loop, queue, partition, name=name)
            jobs, consumers = self._jobs.keys, self._consumers.values
            interval = min(app.queue_ack_wait(q) for q in self.queues) / 3
            for service, *args in (
                (upkeep.heartbeats, interval, jobs, consumers),
                (upkeep.watch_event_loop, app, settings.blocked_loop_warning, self.counts, jobs),
                (
                    upkeep.server_stats,
                    app,
                    conn,
                    self.queues,
                    settings.stats_interval,
                    self._rate_follower.follow,
                ),
                (upkeep.leftover_schedules, app, conn),
                (upkeep.missing_schedules, app, conn, settings.schedules),
                (upkeep.orphaned_jobs, app, conn, self._consumers.keys, settings.orphan_check),
            ):
                name = f"jsworker-{service.__name__.replace('_', '-')}"
                services.start_soon(self._supervised, service, *args, name=name)
            for run in (self._registry.run, *self._services):
                services.start_soon(self._supervised, run, name=f"jsworker-{run.__name__}")
            log.info(
                "worker.started",
                app=app.name,
                worker_id=self._registry.id,
                queues=self.queues,
                concurrency=settings.concurrency,
                prefetch=settings.prefetch,
                server=".".join(map(str, conn.server_version)),
                loop=type(asyncio.get_running_loop()).__module__.split(".")[0],
            )
            self.started.set()
            await self._stop.wait()
            # Heartbeats go on while running jobs get their grace period.
            await self._finish_jobs()
            # A cancel this worker carries out for a producer ends before it goes.
            await answers.close()
            await control.close()
            # Finished jobs whose records the server has not answered yet get the grace
            # period too; past it they are redelivered later, like unfinished ones.
            with anyio.move_on_after(self._grace):
                await self._book.drain()
            await self._book.close()
            services.cancel_scope.cancel()

    async def _queue_loop(self, queue: str, partition: int) -> None:
        assert self.conn is not None
        handler = functools.partial(self._start_at_once, queue, partition)
        while self._taking:
            # A rate limit set at run time reaches the next start (see _start_jobs); the pull
            # is sized by the limit of when it began.
            limited = self._rates.get(queue)
            on_event = PullObserver(queue, self.app.metrics, self.counts)
            # A worker with a job budget pulls no job it could not start before it retires.
            consumer = startup.queue_consumer(
                self.app,
                self.conn,
                self.settings,
                (queue, partition),
                limited,
                on_event,
                handler,
                self._budget,
                self._handbacks.count_soon,
            )
            self._consumers[queue, partition] = consumer
            await consumer.start()
            try:
                await self._start_jobs((queue, partition), consumer)
                return
            except ConsumeError as exc:
                log.warning("queue.pull_stopped", queue=queue, partition=partition, error=str(exc))
                await consumer.close()
                await asyncio.sleep(1.0)
                # The usual cause is a deleted consumer: put it back and pull again.
                with contextlib.suppress(JsworkerError):
                    await self.app.provision(self.conn, [queue])

    async def _start_jobs(self, pulled: tuple[str, int], consumer: PullConsumer) -> None:
        """Start each job ``consumer`` (of ``pulled``: a queue and partition) hands out, as
        slots free up, until it has no more (drained, or finished and its buffer emptied)."""
        queue, partition = pulled
        priority = self.app.queue_priority(queue)
        rates = self._rates
        claim = functools.partial(self._claim, queue, partition, consumer)
        while await consumer.wait():
            # A slot is taken only once there is a job for it: waiting on an idle queue
            # while holding one would starve the other queues.
            await self._limiter.acquire(priority, claim)
            limited = rates.get(queue)  # looked up each time: it may change at run time
            if limited is not None and not await limited.take(len(consumer.buffered()) or 1):
                # Its turn has not come: the slot goes back to the other queues meanwhile. The
                # start is counted just before the job is taken, so it starts in its window.
                self._limiter.release()
                limited.held()
                await limited.next_window()
                continue
            delivery = await consumer.take()
            if delivery is None:  # drained while we waited for the slot
                self._limiter.release()
                continue
            self._slots.start(as_job_run(self.app, queue, delivery, partition))

    def _start_at_once(self, queue: str, partition: int, delivery: Delivery) -> bool:
        # A job that arrives while a slot is free (and, under a rate limit, a start counted
        # already) starts right away; the pull loop below handles those that had to wait in
        # the buffer. Worth its second route (bench/README.md, "Hot-path choices"); both
        # routes settle alike (tests/integration/test_start_paths.py).
        if not self._taking or not self._limiter.try_acquire():
            return False
        limited = self._rates.get(queue)
        if limited is not None and not limited.in_hand():
            self._limiter.release()
            return False
        self._slots.start(as_job_run(self.app, queue, delivery, partition))
        return True

    def _claim(self, queue: str, partition: int, consumer: PullConsumer) -> JobRun | None:
        # What the pull loop waiting first for a slot would start with it, taken by a job's
        # task done with its own (see .slots). A rate-limited queue's loop counts each start
        # in its window itself: its jobs take the loop's way.
        if self._rates.get(queue) is not None:
            return None
        delivery = consumer.take_now()
        return None if delivery is None else as_job_run(self.app, queue, delivery, partition)

    def _holding(self) -> Iterator[Delivery]:
        """Every delivery this worker holds: its jobs', started or waiting, and its buffers'."""
        for job in list(self._jobs):
            yield job.delivery
        yield from self._buffered()

    def _buffered(self) -> Iterator[Delivery]:
        """The jobs pulled and not started yet, of every queue."""
        for consumer in list(self._consumers.values()):
            yield from consumer.buffered()
        for job in self._slots.waiting():
            yield job.delivery

    async def _supervised(self, service: Callable[..., Awaitable[None]], *args: Any) -> None:
        # A service that fails stops the worker, which then hands its jobs back as on SIGTERM.
        try:
            await service(*args)
        except Exception as exc:
            if self._crash is None:
                self._crash = exc
                log.error("worker.crashed", loop=getattr(service, "__name__", "?"), error=repr(exc))
            self._stop.set()

    # -- running --------------------------------------------------------------------------

    def _count_start(self) -> None:
        if self._budget is not None:
            self._budget -= 1
            if self._budget == 0:
                # Recycled: what is still buffered goes back to the server for other workers.
                self.retire("jobs")

    def retire(self, reason: str) -> None:
        """Stop taking jobs, finish the running ones and stop, to be replaced (``reason``
        says why: ``"jobs"``, ``"memory"``)."""
        if self.retired is None:
            self.retired = reason
            log.info("worker.retiring", reason=reason, in_flight=self.in_flight)
        self.stop()

    # -- stopping -------------------------------------------------------------------------

    async def _hand_back_buffered(self) -> None:
        left: list[Delivery] = []
        for consumer in list(self._consumers.values()):
            left.extend(await consumer.drain())
        await self._handbacks.give_back(left)

    async def _run_buffered(self) -> None:
        # The buffers stay with their consumers, whose deliveries get heartbeats while they
        # wait for a slot; the pull loops take from them too, as usual.
        for consumer in list(self._consumers.values()):
            await consumer.finish()
        for pulled, consumer in list(self._consumers.items()):
            with contextlib.suppress(ConsumeError):  # a loop that had stopped has nothing left
                await self._start_jobs(pulled, consumer)

    async def _finish_jobs(self) -> None:
        log.info("worker.stopping", in_flight=self.in_flight, grace=self._grace)
        # A retiring worker runs what it has pulled. Given back, each job would use up one of
        # its delivery attempts, and one recycled process after another could give a job
        # back until it had none left. A worker told to stop gives them back at once.
        retiring = self.retired is not None
        # Every queue at once: one closing its inbox must not leave the others pulling.
        for consumer in list(self._consumers.values()):
            consumer.stop_pulling()
        if not retiring:
            await self._hand_back_buffered()
        with anyio.move_on_after(self._grace) as self._grace_scope:
            if self._stop_now:  # a second signal before the grace period began
                self._grace_scope.cancel()
            if retiring:
                await self._run_buffered()
            if self._jobs:
                await asyncio.wait(list(self._jobs.values()))
        if retiring:
            await self._hand_back_buffered()  # what it had no time left to start
        if self._jobs:
            log.warning("worker.cancelling", in_flight=self.in_flight)
            self._slots.cancelling = True
            running = list(self._jobs.values())
            for task in running:
                task.cancel()
            with anyio.move_on_after(2.0):
                await asyncio.wait(running)
            # A job cancelled before its first step never ran its own clean-up: give it back.
            await self._handbacks.give_back([job.delivery for job in self._jobs])
            self._jobs.clear()
