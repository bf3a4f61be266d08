"""The App: a namespace on the NATS servers, its tasks, and its defaults."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar, Unpack, overload

from prometheus_client import CollectorRegistry

from ._config import from_environment
from ._core.bridge import SyncBridge
from ._core.connections import ConnectionPool
from ._core.hooks import HookDeclarations, Hooks, State
from ._core.job_status import JobState, JobStatus
from ._core.layout import (
    depth_spec,
    dlq_spec,
    events_spec,
    final_state_spec,
    job_stream_specs,
    leases_spec,
    queue_consumer_specs,
    rates_spec,
    relay_specs,
    schedules_spec,
    sinks_spec,
    tally_spec,
)
from ._core.middleware import Middleware, MiddlewareChain
from ._core.options import AppArguments as AppArguments
from ._core.options import AppOptions, QueueOptions, split_arguments
from ._core.partitioning import QueueLayout
from ._core.serializers import JSONSerializer, Serializer
from ._core.task_options import TaskArguments, TaskDeclaration, TaskOptions
from ._enqueue.async_result import AsyncResult
from ._enqueue.bound import Given
from ._enqueue.by_name import check_task_name, named_task
from ._enqueue.calls import Call, check_job_id, is_job_id
from ._enqueue.ported import ArqSpelling
from ._enqueue.producer import Producer
from ._enqueue.receipt import Job
from ._enqueue.task import Signature, Task
from ._errors import ConfigurationError
from ._lifecycle.bucket import BATCHED_SINCE, RECORDS_SINCE, jobs_bucket_spec
from ._lifecycle.client import JobLifecycle
from ._limits.spec import Rate, parse_rate, partition_limits
from ._observability.metrics import metrics_for
from ._scheduling.claims import claims_spec
from ._scheduling.declare import DELAYED_SINCE, Schedule, build_schedule
from ._scheduling.delayed import DelayedJobs
from ._scheduling.periodic import check_schedule_size
from ._wire.names import Namespace, Role, validate_app_name, validate_name
from .events._emit import emit_enqueued
from .jetstream.connection import Connection, ConnectOptions
from .jetstream.topology import (
    ConsumerSpec,
    ReplicasDiffer,
    StreamSpec,
    apply_consumer,
    ensure_consumer,
    ensure_stream,
)
from .workflows._handle import Workflow
from .workflows._start import start_linked

P = ParamSpec("P")
R = TypeVar("R")


class App(HookDeclarations, QueueLayout, ArqSpelling):
    """A jsworker application: tasks declared with :meth:`task`, enqueued by producers and run
    by ``jsworker run``.

    ``name`` becomes the namespace on the server (stream ``JSW_<NAME>``, subjects
    ``jsw.<name>.q.<queue>.<task>``). ``servers`` defaults to ``JSWORKER_URL`` (comma
    separated) or ``nats://127.0.0.1:4222``. Every other keyword is an option of one of three
    kinds (see :class:`AppArguments`), kept as objects on the app:

    * ``app.defaults`` (:class:`TaskOptions`): ``max_retries``, ``max_crashes``, ``timeout``, ``ack_wait``,
      ``retry_*``, ``default_queue``: defaults each task may override;
    * ``app.options`` (:class:`AppOptions`): stream and producer settings;
    * ``app.connection`` (:class:`ConnectOptions`): credentials, TLS and timeouts, each left
      out falling back to its ``JSWORKER_*`` variable (``JSWORKER_USER``,
      ``JSWORKER_PASSWORD``, ``JSWORKER_TOKEN``, ``JSWORKER_CREDS``, ``JSWORKER_NKEY_SEED``,
      ``JSWORKER_TLS_CA``, ``JSWORKER_TLS_CERT``, ``JSWORKER_TLS_KEY``,
      ``JSWORKER_INBOX_PREFIX``).

    ``task_defaults``, ``options`` and ``connection`` may also be passed whole; keywords win
    over them. Metrics go to ``metrics_registry`` (prometheus-client's default registry if None).
    ``middleware`` wraps every enqueue and run (see :class:`~jsworker.Middleware`).
    """

    def __init__(
        self,
        name: str,
        servers: str | Sequence[str] | None = None,
        *,
        serializer: Serializer | None = None,
        metrics_registry: CollectorRegistry | None = None,
        task_defaults: TaskOptions | None = None,
        options: AppOptions | None = None,
        connection: ConnectOptions | None = None,
        middleware: Sequence[Middleware] = (),
        **arguments: Unpack[AppArguments],
    ) -> None:
        self.name = validate_app_name(name)
        self.namespace = Namespace(name)
        self.serializer: Serializer = serializer or JSONSerializer()
        split = split_arguments(dict(arguments))
        self.defaults = dataclasses.replace(task_defaults or TaskOptions(), **split[TaskOptions])
        # Keywords win over a whole options object, which wins over JSWORKER_* variables.
        given_options = dataclasses.asdict(options) if options is not None else {}
        given_options.update(split[AppOptions])
        self.options = AppOptions(**from_environment(AppOptions, given_options))
        given = dataclasses.asdict(connection) if connection is not None else {}
        given.update(split[ConnectOptions])
        if servers is not None:
            given["servers"] = servers
        # Deployments keep secrets out of code: every credential falls back to JSWORKER_*.
        self.connection = ConnectOptions.from_environment(**given)
        self.metrics = metrics_for(metrics_registry)
        self.tasks: dict[str, Task[Any, Any]] = {}
        #: Periodic schedules declared with ``app.schedule`` or ``@app.task(cron=...)``, by name.
        self.schedules: dict[str, Schedule] = {}
        #: Queues declared with :meth:`queue`, by name (others take the defaults).
        self.queue_options: dict[str, QueueOptions] = {}
        #: The app's middleware, in order (see :class:`~jsworker.Middleware`).
        self.middleware = MiddlewareChain(middleware)
        #: Start and stop hooks of worker processes (:meth:`on_startup`, :meth:`on_shutdown`).
        self.hooks = Hooks()
        #: What start hooks keep for tasks, per worker process (see :class:`~jsworker._core.hooks.State`).
        self.state = State()
        #: The connections enqueues and job reads use, one per event loop.
        self.connections = ConnectionPool(functools.partial(self.connect_options, "producer"))
        #: How sync callers (``task.delay``, ``job.result``) run on a background event loop;
        #: a forked child forgets the parent's loop and the connections on it.
        self.bridge = SyncBridge(on_fork=self.connections.forget, on_exit=self.connections.aclose)
        # The app is where the features join the core: the producer stores delayed jobs the
        # scheduling feature's way and tells stored jobs to the job events.
        self.producer = Producer(
            self, DelayedJobs(), functools.partial(emit_enqueued, self.namespace, self.metrics)
        )
        #: Results, status and cancels of this app's jobs (what ``Job`` and ``App`` delegate to).
        self.lifecycle = JobLifecycle(self)

    @property
    def servers(self) -> list[str]:
        """The NATS server URLs (settable: the next enqueue or read connects to them)."""
        return list(self.connection.servers)

    @servers.setter
    def servers(self, servers: str | Sequence[str]) -> None:
        self.connection = dataclasses.replace(self.connection, servers=servers)
        self.connections.renew()

    def __repr__(self) -> str:
        return f"<App {self.name} tasks={len(self.tasks)}>"

    # -- declaring tasks ------------------------------------------------------------------

    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        bind: Literal[True],
        ctx: Literal[False] = False,
        **options: Unpack[TaskDeclaration],
    ) -> Callable[[Callable[Concatenate[Any, P], R]], Task[P, R]]: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        bind: Literal[False] = False,
        ctx: Literal[True],
        **options: Unpack[TaskDeclaration],
    ) -> Callable[[Callable[Concatenate[Any, P], R]], Task[P, R]]: ...

    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        bind: Literal[False] = False,
        ctx: Literal[False] = False,
        **options: Unpack[TaskDeclaration],
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(
        self,
        fn: Callable[P, R] | None = None,
        /,
        *,
        bind: bool = False,
        ctx: bool = False,
        name: str | None = None,
        cron: str | None = None,
        tz: str | None = None,
        unique: bool = False,
        unique_key: Callable[..., str] | None = None,
        rate_limit: str | None = None,
        partition_key: Callable[..., Any] | None = None,
        max_running_per_partition: int | None = None,
        rate_limit_per_partition: str | None = None,
        **options: Unpack[TaskArguments],
    ) -> Task[P, R] | Callable[[Callable[..., R]], Task[Any, R]]:
        """Register a function as a task, bare (``@app.task``) or with options.

        Async functions run on the worker's event loop; sync functions run in the worker's
        thread pool, or with ``executor="process"`` in its pool of processes (a module-level
        function only; the app's default executor applies to sync functions). Options (see
        :class:`TaskOptions`) left out or None take the app's defaults. ``cron`` (with ``tz``)
        also declares a periodic schedule named after the task that runs it without arguments
        (see :meth:`schedule`). ``unique=True`` makes one job per task and arguments at a time
        (``unique_key``: per the string a function of the arguments returns): while it is
        scheduled, queued or running, enqueueing it again makes no second job and returns a
        receipt with ``duplicate=True`` naming it. ``rate_limit`` (``"10/s"``, ``"N/m"``,
        ``"N/h"``) caps the starts of its jobs across every worker; a job waiting for its turn
        holds its worker slot (a queue's ``rate_limit`` holds jobs back before they are taken:
        give such a task a queue of its own). ``bind=True`` (Celery's) passes the function's
        first parameter an object with ``request`` and ``retry``, ``ctx=True`` (arq's) a
        mapping of the job and ``app.state`` (see :mod:`jsworker._enqueue.bound`); enqueues
        take the parameters after it. Names and values are checked now, so a bad one fails at
        import, not at enqueue.
        """
        if bind and ctx:
            raise ConfigurationError("bind=True and ctx=True both pass the function's first parameter")
        given: Given | None = "bind" if bind else "ctx" if ctx else None
        if unique_key is not None and not callable(unique_key):
            raise ConfigurationError(f"unique_key must be a function of the arguments, not {unique_key!r}")
        unknown = set(options) - set(TaskArguments.__annotations__)
        if unknown:
            raise TypeError(f"app.task() got unknown options: {', '.join(sorted(unknown))}")
        chosen: dict[str, Any] = {k: v for k, v in options.items() if v is not None}
        task_options = dataclasses.replace(self.defaults, **chosen)

        def register(func: Callable[P, R]) -> Task[P, R]:
            task_name = check_task_name(name or func.__name__)
            if task_name in self.tasks and self.tasks[task_name].fn is not func:
                raise ConfigurationError(
                    f"app {self.name} already has a task named {task_name!r}; "
                    "pass name=... to tell them apart"
                )
            declared = task_options
            if (
                declared.executor == "process"
                and "executor" not in chosen
                and inspect.iscoroutinefunction(func)
            ):
                # The app's default executor is for its sync tasks: an async one runs on the loop.
                declared = dataclasses.replace(declared, executor="thread")
            task = Task(self, func, task_name, declared, unique_key or bool(unique), given)
            if rate_limit is not None:
                task.rate_limit = parse_rate(rate_limit, f"task {task_name}: rate_limit")
            limits = partition_limits(
                task_name, partition_key, max_running_per_partition, rate_limit_per_partition
            )
            task.partition_key, task.max_running_per_partition, task.rate_limit_per_partition = limits
            if cron is not None or tz is not None:
                if cron is None:
                    raise ConfigurationError(f"task {task_name}: tz is for cron=...; give cron too")
                self.schedule(task, cron=cron, tz=tz)
            self.tasks[task_name] = task
            self.metrics.declare_task(task.queue, task_name)
            return task

        if fn is not None:
            return register(fn)
        return register

    def schedule(
        self,
        task: Task[Any, Any],
        *,
        cron: str | None = None,
        every: timedelta | float | None = None,
        name: str | None = None,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        tz: str | None = None,
        expires: timedelta | float | Literal["next", "never"] | None = None,
        headers: Mapping[str, str] | None = None,
        enabled: bool = True,
    ) -> Schedule:
        """Declare a periodic schedule: ``task(*args, **kwargs)`` is enqueued on every tick of
        ``cron`` (5 fields, minute first; 6 with seconds first; or ``@hourly``, ``@daily``...)
        in time zone ``tz`` (an IANA name; UTC when None), or every ``every`` (a timedelta or
        seconds, at least 1).

        The server keeps and fires the schedule: workers install it at start (``jsworker run``
        reconciles every declared schedule, see docs/scheduling.md), so it needs no process of its own
        and each tick makes one job however many workers run. ``name`` (default: the task's
        name) is unique in the app. A tick that has not started ``expires`` seconds after it
        was due is not run (``"next"``: once the next tick is due; ``"never"``); None takes
        the task's own ``expires``, else ``"next"``, so ticks missed while no worker ran do
        not all run in a burst when one starts. ``headers`` ride on every tick
        (``current_job().headers``). ``enabled=False`` switches it off: a worker starting with
        this code pauses it, and workers of older code keep it paused (docs/scheduling.md: "Switching a
        schedule off"). A bad expression, zone, interval or argument raises
        :class:`ConfigurationError` or ``TypeError`` here, naming the schedule.
        """
        label = validate_name("schedule", name or task.name)
        if label in self.schedules:
            raise ConfigurationError(f"app {self.name} already has a schedule named {label!r}; pass name=...")
        if task.app is not self:
            raise ConfigurationError(f"schedule {label!r}: task {task.name} belongs to another app")
        declared = build_schedule(
            self, task, label, cron=cron, every=every, tz=tz, args=args, kwargs=kwargs,
            expires=expires, headers=headers, enabled=enabled,
        )  # fmt: skip
        check_schedule_size(self, declared)
        self.schedules[label] = declared
        return declared

    async def asend_task(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        queue: str | None = None,
        **options: Any,
    ) -> Job:
        """Enqueue task ``name`` without its code (Celery's ``send_task``): a declared task as
        ``aapply`` would, any other name to ``queue`` (default: the app's default queue) with
        no check of its arguments (see :mod:`jsworker._enqueue.by_name`). ``options`` are ``aapply``'s:
        ``job_id``, ``countdown``, ``eta``, ``expires``, ``headers``."""
        return await named_task(self, name, queue).aapply(args, kwargs, queue=queue, **options)

    def send_task(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        queue: str | None = None,
        **options: Any,
    ) -> Job:
        """Sync form of :meth:`asend_task`."""
        return named_task(self, name, queue).apply(args, kwargs, queue=queue, **options)

    # -- jobs after their enqueue ---------------------------------------------------------

    def job(self, job_id: str) -> Job:
        """A handle on job ``job_id`` from an id kept elsewhere (a web request, another
        process): the same ``result``/``status``/``cancel`` as an enqueue's receipt."""
        return Job(id=check_job_id(job_id), task="", queue="", seq=0, app=self)

    def AsyncResult(self, job_id: str) -> AsyncResult:
        """Celery's ``app.AsyncResult(id)``: :meth:`job`'s state in Celery's names, result, revoke."""
        return AsyncResult(self.job(job_id))

    async def send_linked(
        self, task: Task[Any, Any], call: Call, link: Signature | None, link_error: Signature | None
    ) -> Job:
        """Store ``call`` as a workflow's first step, ``link`` after it (see ``Task.aapply``)."""
        return await start_linked(self, task, call, link, link_error)

    def workflow(self, flow_id: str) -> Workflow:
        """A handle on workflow ``flow_id`` (a chain, group or chord): its status and result."""
        return Workflow(self, check_job_id(flow_id))

    async def astatus(self, job_id: str) -> JobStatus:
        """Where job ``job_id`` is in its lifecycle: ``scheduled``, ``queued``, ``running``,
        ``retrying``, ``succeeded``, ``failed``, ``cancelled``, ``expired`` or ``unknown``,
        with attempts and times where known (docs/lifecycle.md says what each is read
        from). An id no job can have (a dot in it, say: user input) is ``unknown``. Needs
        nats-server 2.11+."""
        if not is_job_id(job_id) and isinstance(job_id, str):
            return JobStatus(job_id, JobState.UNKNOWN)
        return await self.lifecycle.status(check_job_id(job_id))

    def status(self, job_id: str) -> JobStatus:
        """Sync form of :meth:`astatus`."""
        return self.bridge.run_sync(self.astatus, job_id)

    async def acancel(self, job_id: str) -> bool:
        """Cancel job ``job_id`` before it finishes: True when it was scheduled, queued,
        retrying or running and now never runs (again), False when there was nothing to
        cancel (an unknown id, one no job can have among them, or a job that already
        finished). A running async task is cancelled within moments; a sync one is told
        through ``current_job().cancelled``."""
        if not is_job_id(job_id) and isinstance(job_id, str):
            return False
        return await self.lifecycle.cancel(check_job_id(job_id))

    def cancel(self, job_id: str) -> bool:
        """Sync form of :meth:`acancel`."""
        return self.bridge.run_sync(self.acancel, job_id)

    def queue(
        self,
        name: str,
        *,
        max_running: int | None = None,
        priority: int = 0,
        rate_limit: str | None = None,
        fair: bool = False,
        partitions: int | None = None,
        previous_partitions: int | None = None,
    ) -> QueueOptions:
        """Declare how queue ``name`` is served: ``max_running`` jobs at most at once across
        all workers (the server enforces it; ``--concurrency`` is per worker process), its
        ``priority`` among the queues a worker serves, and ``rate_limit`` (``"50/s"``,
        ``"N/m"``, ``"N/h"``) starts across all workers, taken before a worker takes a job.
        With ``fair``, the partitions of its jobs (each task's ``partition_key``; the task
        itself for a task without one) take turns: one partition's backlog never holds up
        another's jobs for long (see :mod:`jsworker._limits.fair`). ``partitions``: the job
        streams its jobs are spread over (the app's ``partitions`` when None; one for a queue
        with ``max_running`` or ``fair``); ``previous_partitions``: while they change, the count
        before, whose layout its jobs may still be in.
        A worker applies a changed ``max_running`` to the server when it starts."""
        rate = parse_rate(rate_limit, f"queue {name!r}: rate_limit") if rate_limit is not None else None
        if not isinstance(fair, bool):
            raise ConfigurationError(f"queue {name!r}: fair must be True or False, not {fair!r}")
        options = QueueOptions(
            max_running=max_running,
            priority=priority,
            rate_limit=rate,
            fair=fair,
            partitions=partitions,
            previous_partitions=previous_partitions,
        )
        self.queue_options[validate_name("queue", name)] = options
        return options

    @property
    def fair_queues(self) -> frozenset[str]:
        """The queues declared ``fair``."""
        return frozenset(name for name, options in self.queue_options.items() if options.fair)

    def queue_priority(self, queue: str) -> int:
        """The priority of ``queue`` (0 unless declared)."""
        declared = self.queue_options.get(queue)
        return declared.priority if declared is not None else 0

    @property
    def queues(self) -> list[str]:
        """Queues that have at least one task, sorted."""
        return sorted({t.queue for t in self.tasks.values()})

    # -- topology -------------------------------------------------------------------------

    def configure_connection(self, servers: Sequence[str] | None = None, **given: str | None) -> None:
        """Change where and how the app connects; used by the command line's flags.

        ``given`` takes the names of :class:`ConnectOptions` fields (``user``, ``token``,
        ``tls_ca``, ...); None leaves a value as it is. The next enqueue or read connects anew.
        """
        changes: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        if servers:
            changes["servers"] = servers
        try:
            self.connection = dataclasses.replace(self.connection, **changes)
        except TypeError as exc:
            raise ConfigurationError(f"unknown connection option: {exc}") from exc
        self.connections.renew()

    def configure_options(self, **given: Any) -> None:
        """Change app options (fields of :class:`AppOptions`); used by the command line's flags.

        None leaves a value as it is. Applies to streams created or checked afterwards.
        """
        changes = {k: v for k, v in given.items() if v is not None}
        try:
            self.options = dataclasses.replace(self.options, **changes)
        except TypeError as exc:
            raise ConfigurationError(f"unknown app option: {exc}") from exc

    @property
    def inbox_space(self) -> str:
        """The prefix of every reply inbox of this app's processes (``inbox_prefix``, else
        ``_jsw_inbox.<app>``): only this app's users may subscribe under it."""
        return self.connection.inbox_prefix or self.namespace.inbox_prefix

    def connect_options(self, role: Role, purpose: str | None = None) -> ConnectOptions:
        """How this app connects in ``role``: replies come to ``<inbox space>.<role>.…``, and
        the connection is named ``jsworker:<app>:<purpose or role>`` on the server (monitoring)."""
        name, inbox = f"jsworker:{self.name}:{purpose or role}", f"{self.inbox_space}.{role}"
        return dataclasses.replace(self.connection, name=name, inbox=inbox)

    def queue_ack_wait(self, queue: str) -> float:
        """The consumer ``ack_wait`` of ``queue``: the largest of its tasks'."""
        waits = [t.options.ack_wait for t in self.tasks.values() if t.queue == queue]
        return max(waits, default=self.defaults.ack_wait)

    def stream_specs(self, server_version: tuple[int, ...]) -> list[StreamSpec]:
        """Every stream of the app on a server of ``server_version``: the job and dead-letter
        streams, the jobs bucket (servers with per-message TTLs), the schedules and claims
        streams (servers with schedules) and the events stream if the app emits events."""
        schedules = server_version >= DELAYED_SINCE
        specs = [*job_stream_specs(self, schedules), dlq_spec(self)]
        if server_version >= RECORDS_SINCE:
            batched = server_version >= BATCHED_SINCE
            specs.append(jobs_bucket_spec(self.namespace, self.options.replicas, batched=batched))
        if schedules:
            specs += [schedules_spec(self), claims_spec(self.namespace, self.options.replicas)]
        if self.options.events:
            specs += [events_spec(self), depth_spec(self)]
        if self.options.workflows and schedules:
            specs.append(tally_spec(self))
        if self.options.spark_sinks:
            specs.append(sinks_spec(self))
        partitioned = [t for t in self.tasks.values() if t.partition_key is not None]
        if schedules and (self.rate_limits() or any(t.rate_limit_per_partition for t in partitioned)):
            specs.append(rates_spec(self))
        # Leases: those of the partitions, and the movers' of fair queues.
        if schedules and (any(t.max_running_per_partition for t in partitioned) or self.fair_queues):
            specs.append(leases_spec(self))
        return specs

    def rate_limits(self) -> dict[str, Rate]:
        """The app's rate limits by scope: ``q-<queue>`` for a queue's, ``t-<task>`` for a
        task's."""
        limits = {f"q-{q}": o.rate_limit for q, o in self.queue_options.items() if o.rate_limit}
        limits.update({f"t-{t.name}": t.rate_limit for t in self.tasks.values() if t.rate_limit})
        return limits

    async def provision_streams(self, conn: Connection) -> list[ReplicasDiffer]:
        """Create or update the app's streams (:meth:`stream_specs`);
        returns the existing streams whose replicas differ from ``replicas`` (left as they are)."""
        found = [await ensure_stream(conn, spec) for spec in self.stream_specs(conn.server_version)]
        return [differ for differ in found if differ is not None]

    async def provision(
        self, conn: Connection | None = None, queues: Iterable[str] | None = None
    ) -> list[ReplicasDiffer]:
        """Create or update streams and queue consumers (idempotent; workers do it at start);
        returns the existing streams whose replicas differ from ``replicas``."""
        conn = conn or await self.connections.connection()
        differ = await self.provision_streams(conn)
        for spec in queue_consumer_specs(self, queues if queues is not None else self.queues):
            # Read first: what was set at run time (a queue's limits) stays.
            await apply_consumer(conn, spec)
        for spec in relay_specs(self, conn.server_version):
            await ensure_consumer(conn, spec)
        for spec in self.final_state_specs(conn.server_version):
            # Read first: where only the provisioner may create one, a worker finds it made.
            await apply_consumer(conn, spec)
        return differ

    def final_state_specs(self, server_version: tuple[int, ...]) -> list[ConsumerSpec]:
        """The consumers of the app's final-state handlers (none on a server without the
        jobs bucket, before 2.11)."""
        if server_version < RECORDS_SINCE:
            return []
        return [final_state_spec(self, name) for name in self.hooks.final_states]

    # -- lifecycle ------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the connection enqueues on this event loop used."""
        await self.connections.aclose()

    def close(self) -> None:
        """Close the background connection sync enqueues used, and stop its thread (both start
        again on next use)."""
        self.bridge.close(self.connections.aclose)
