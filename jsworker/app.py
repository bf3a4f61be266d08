"""The App: a namespace on the NATS servers, its tasks, and its defaults."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ParamSpec, TypeVar, overload

from prometheus_client import CollectorRegistry

from .errors import ConfigurationError
from .jetstream.connection import Connection, ConnectOptions, default_servers
from .jetstream.topology import ConsumerSpec, StreamSpec, ensure_consumer, ensure_stream
from .naming import Namespace, validate_name
from .observability.metrics import metrics_for
from .producer import Producer
from .serializers import JSONSerializer, Serializer
from .task import ExceptionTypes, Task, TaskOptions, check_seconds

P = ParamSpec("P")
R = TypeVar("R")

_DAY = 86400.0


class App:
    """A jsworker application: tasks declared with :meth:`task`, enqueued by producers and run
    by ``jsworker run``.

    ``name`` becomes the namespace on the server (stream ``JSW_<NAME>``, subjects
    ``jsw.<name>.q.<queue>.<task>``), so two apps on one server never see each other's jobs.
    ``servers`` defaults to ``JSWORKER_URL`` (comma separated) or ``nats://127.0.0.1:4222``.
    Task options (``max_retries``, ``timeout``, ``ack_wait``, ``retry_*``) are defaults each
    task may override. Credentials: ``user``/``password``, ``token``, ``credentials`` (a
    ``.creds`` file), ``nkey_seed`` (a seed file), ``tls_ca``/``tls_cert``/``tls_key``; each
    left out falls back to ``JSWORKER_USER``, ``JSWORKER_PASSWORD``, ``JSWORKER_TOKEN``,
    ``JSWORKER_CREDS``, ``JSWORKER_NKEY_SEED``, ``JSWORKER_TLS_CA``, ``JSWORKER_TLS_CERT``,
    ``JSWORKER_TLS_KEY``. ``publish_timeout`` is how long one enqueue keeps trying through a
    server restart or a leader election (same job id, so never twice) before raising
    :class:`~jsworker.EnqueueError`; ``connect_timeout`` bounds the first connection.
    Metrics go to ``metrics_registry`` (prometheus-client's default registry if None).
    ``events=True`` makes producers and workers publish job events (see :mod:`jsworker.events`)
    to ``JSW_<NAME>_EVENTS``, kept for ``events_max_age`` seconds.
    """

    def __init__(
        self,
        name: str,
        servers: str | Sequence[str] | None = None,
        *,
        serializer: Serializer | None = None,
        default_queue: str = "default",
        max_retries: int = 3,
        timeout: float | None = None,
        ack_wait: float = 30.0,
        retry_backoff: float = 1.0,
        retry_backoff_max: float = 600.0,
        retry_on: ExceptionTypes = (Exception,),
        dont_retry_on: ExceptionTypes = (),
        duplicate_window: float = 120.0,
        replicas: int = 1,
        dlq_max_age: float = 7 * _DAY,
        events: bool = False,
        events_max_age: float = 7 * _DAY,
        max_ack_pending: int = 20_000,
        publish_timeout: float = 15.0,
        connect_timeout: float = 5.0,
        user: str | None = None,
        password: str | None = None,
        token: str | None = None,
        credentials: str | None = None,
        nkey_seed: str | None = None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        self.name = validate_name("app", name)
        self.namespace = Namespace(name)
        if isinstance(servers, str):
            servers = [s.strip() for s in servers.split(",") if s.strip()]
        self.servers: list[str] = list(servers) if servers else default_servers()
        self.serializer: Serializer = serializer or JSONSerializer()
        self.defaults = TaskOptions(
            queue=default_queue,
            max_retries=max_retries,
            timeout=timeout,
            ack_wait=ack_wait,
            retry_backoff=retry_backoff,
            retry_backoff_max=retry_backoff_max,
            retry_on=retry_on,
            dont_retry_on=dont_retry_on,
        )
        self.default_queue = self.defaults.queue
        self.duplicate_window = check_seconds("duplicate_window", duplicate_window)
        self.replicas = replicas
        self.dlq_max_age = check_seconds("dlq_max_age", dlq_max_age)
        self.events = bool(events)
        self.events_max_age = check_seconds("events_max_age", events_max_age)
        self.max_ack_pending = max_ack_pending
        self.publish_timeout = check_seconds("publish_timeout", publish_timeout)
        # Deployments keep secrets out of code: every credential falls back to JSWORKER_*.
        self._credentials = ConnectOptions(
            user=_or_env(user, "USER"),
            password=_or_env(password, "PASSWORD"),
            token=_or_env(token, "TOKEN"),
            credentials=_or_env(credentials, "CREDS"),
            nkey_seed=_or_env(nkey_seed, "NKEY_SEED"),
            tls_ca=_or_env(tls_ca, "TLS_CA"),
            tls_cert=_or_env(tls_cert, "TLS_CERT"),
            tls_key=_or_env(tls_key, "TLS_KEY"),
            connect_deadline=check_seconds("connect_timeout", connect_timeout),
        )
        self.metrics = metrics_for(metrics_registry)
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.producer = Producer(self)

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
        name: str | None = None,
        queue: str | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        ack_wait: float | None = None,
        retry_backoff: float | None = None,
        retry_backoff_max: float | None = None,
        retry_on: ExceptionTypes | None = None,
        dont_retry_on: ExceptionTypes | None = None,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(
        self,
        fn: Callable[P, R] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
        ack_wait: float | None = None,
        retry_backoff: float | None = None,
        retry_backoff_max: float | None = None,
        retry_on: ExceptionTypes | None = None,
        dont_retry_on: ExceptionTypes | None = None,
    ) -> Task[P, R] | Callable[[Callable[P, R]], Task[P, R]]:
        """Register a function as a task, bare (``@app.task``) or with options.

        Async functions run on the worker's event loop; sync functions run in the worker's
        thread pool. Options left out take the app's defaults (see :class:`TaskOptions`).
        Names and values are checked now, so a bad one fails at import, not at enqueue.
        """
        overrides: dict[str, Any] = {
            "queue": queue,
            "max_retries": max_retries,
            "timeout": timeout,
            "ack_wait": ack_wait,
            "retry_backoff": retry_backoff,
            "retry_backoff_max": retry_backoff_max,
            "retry_on": retry_on,
            "dont_retry_on": dont_retry_on,
        }
        options = dataclasses.replace(self.defaults, **{k: v for k, v in overrides.items() if v is not None})

        def register(func: Callable[P, R]) -> Task[P, R]:
            task_name = validate_name("task", name or func.__name__)
            if task_name in self.tasks and self.tasks[task_name].fn is not func:
                raise ConfigurationError(
                    f"app {self.name} already has a task named {task_name!r}; "
                    "pass name=... to tell them apart"
                )
            task = Task(self, func, task_name, options)
            self.tasks[task_name] = task
            return task

        if fn is not None:
            return register(fn)
        return register

    @property
    def queues(self) -> list[str]:
        """Queues that have at least one task, sorted."""
        return sorted({t.queue for t in self.tasks.values()})

    # -- topology -------------------------------------------------------------------------

    def configure_connection(self, servers: Sequence[str] | None = None, **credentials: str | None) -> None:
        """Change where and how the app connects; used by the command line's flags.

        ``credentials`` take the names of the constructor's (``user``, ``token``, ``tls_ca``,
        ...); None leaves a value as it is. Applies to connections opened afterwards.
        """
        if servers:
            self.servers = list(servers)
        changes = {k: v for k, v in credentials.items() if v is not None}
        try:
            self._credentials = dataclasses.replace(self._credentials, **changes)  # type: ignore[arg-type]
        except TypeError as exc:
            raise ConfigurationError(f"unknown connection option: {exc}") from exc

    def connect_options(self, role: str) -> ConnectOptions:
        """How this app connects; ``role`` names the connection on the server (monitoring)."""
        return dataclasses.replace(
            self._credentials, servers=tuple(self.servers), name=f"jsworker:{self.name}:{role}"
        )

    def stream_spec(self) -> StreamSpec:
        """The job stream."""
        ns = self.namespace
        return StreamSpec(
            name=ns.stream,
            subjects=(ns.job_subjects,),
            work_queue=True,
            replicas=self.replicas,
            duplicate_window=self.duplicate_window,
        )

    def dlq_spec(self) -> StreamSpec:
        """The dead-letter stream."""
        ns = self.namespace
        return StreamSpec(
            name=ns.dlq_stream,
            subjects=(ns.dlq_subjects,),
            work_queue=False,
            replicas=self.replicas,
            duplicate_window=min(self.duplicate_window, self.dlq_max_age),
            max_age=self.dlq_max_age,
        )

    def events_spec(self) -> StreamSpec:
        """The job-event stream (used when the app emits events)."""
        ns = self.namespace
        return StreamSpec(
            name=ns.events_stream,
            subjects=(ns.events_subjects,),
            work_queue=False,
            replicas=self.replicas,
            # Events carry no Nats-Msg-Id; the window only has to be valid (<= max_age).
            duplicate_window=min(1.0, self.events_max_age),
            max_age=self.events_max_age,
        )

    def queue_ack_wait(self, queue: str) -> float:
        """The consumer ``ack_wait`` of ``queue``: the largest of its tasks'."""
        waits = [t.options.ack_wait for t in self.tasks.values() if t.queue == queue]
        return max(waits, default=self.defaults.ack_wait)

    def consumer_spec(self, queue: str) -> ConsumerSpec:
        """The durable pull consumer of ``queue``."""
        return ConsumerSpec(
            stream=self.namespace.stream,
            name=validate_name("queue", queue),
            filter_subject=self.namespace.queue_filter(queue),
            ack_wait=self.queue_ack_wait(queue),
            max_ack_pending=self.max_ack_pending,
        )

    async def provision_streams(self, conn: Connection) -> None:
        """Create or update the job and dead-letter streams, and the events stream if used."""
        await ensure_stream(conn, self.stream_spec())
        await ensure_stream(conn, self.dlq_spec())
        if self.events:
            await ensure_stream(conn, self.events_spec())

    async def provision(self, conn: Connection | None = None, queues: Iterable[str] | None = None) -> None:
        """Create or update streams and queue consumers (idempotent; workers do it at start)."""
        conn = conn or await self.producer.connection()
        await self.provision_streams(conn)
        for queue in queues if queues is not None else self.queues:
            await ensure_consumer(conn, self.consumer_spec(queue))

    # -- lifecycle ------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the connection enqueues on this event loop used."""
        await self.producer.aclose()

    def close(self) -> None:
        """Close the background connection sync enqueues used."""
        self.producer.close()


def _or_env(value: str | None, name: str) -> str | None:
    return value if value is not None else (os.environ.get(f"JSWORKER_{name}") or None)
