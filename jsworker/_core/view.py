"""What the modules under the app need of it, as protocols.

:class:`~jsworker.App` (``app.py``) imports the core's modules and wires the features into
them, so none of them may import ``App``, not even for an annotation: each names the app as
an :class:`AppView`, the part of it that they read. ``App`` has all of it; a feature that
needs more (the periodic schedules' declarations, say) extends the protocol with its own types.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .._observability.metrics import Metrics
from .._wire.names import Namespace, Role
from ..jetstream.connection import Connection, ConnectOptions
from ..jetstream.topology import ConsumerSpec, ReplicasDiffer, StreamSpec
from .bridge import SyncBridge
from .connections import ConnectionPool
from .job_status import Form, JobStatus
from .options import AppOptions, QueueOptions
from .serializers import Serializer
from .task_options import TaskOptions


class TaskView(Protocol):
    """A declared task, as the modules under it read it (:class:`~jsworker.Task` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def queue(self) -> str: ...

    @property
    def options(self) -> TaskOptions: ...

    @property
    def unique(self) -> bool | Callable[..., str]:
        """Whether its jobs are unique (or the function that makes their key)."""
        ...

    def given_back(self, value: Any) -> Any:
        """A kept return value as the task's return annotation says (as kept when it says
        nothing to convert)."""
        ...


class JobReader(Protocol):
    """Results, status and cancels of an app's jobs: the lifecycle feature's part
    (:class:`jsworker._lifecycle.client.JobLifecycle`), which the app wires in."""

    async def result(self, job_id: str, seq: int | None, timeout: float | None) -> Any:
        """What job ``job_id`` returned, waiting up to ``timeout`` seconds; ``seq`` is the
        sequence of its message (0 for a delayed job's), None when only the id is known."""
        ...

    async def status(self, job_id: str, form: Form | None = None) -> JobStatus:
        """Where job ``job_id`` is in its lifecycle (limited to ``form`` when given)."""
        ...

    async def cancel(self, job_id: str) -> bool:
        """Cancel job ``job_id``: True when it now never runs (again)."""
        ...


class AppView(Protocol):
    """An app as the modules under :class:`~jsworker.App` see it: its names and options,
    its declared tasks and queues, its connections, and its jobs' lifecycle."""

    @property
    def name(self) -> str: ...

    @property
    def namespace(self) -> Namespace: ...

    @property
    def serializer(self) -> Serializer: ...

    @property
    def options(self) -> AppOptions: ...

    @property
    def defaults(self) -> TaskOptions: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def connection(self) -> ConnectOptions: ...

    @property
    def tasks(self) -> Mapping[str, TaskView]: ...

    @property
    def queues(self) -> list[str]: ...

    @property
    def queue_options(self) -> Mapping[str, QueueOptions]: ...

    @property
    def fair_queues(self) -> frozenset[str]: ...

    @property
    def connections(self) -> ConnectionPool: ...

    @property
    def bridge(self) -> SyncBridge: ...

    @property
    def lifecycle(self) -> JobReader: ...

    def connect_options(self, role: Role, purpose: str | None = None) -> ConnectOptions:
        """How the app connects in ``role`` (``purpose`` names the connection)."""
        ...

    def queue_ack_wait(self, queue: str) -> float:
        """The consumer ``ack_wait`` of ``queue``."""
        ...

    def queue_priority(self, queue: str) -> int:
        """The priority of ``queue``."""
        ...

    def queue_partitions(self, queue: str) -> int:
        """How many job streams the jobs of ``queue`` are spread over."""
        ...

    def queue_layouts(self, queue: str) -> tuple[int, ...]:
        """The partition counts the jobs of ``queue`` may have been placed by."""
        ...

    def queue_streams(self, queue: str) -> int:
        """How many job streams hold jobs of ``queue``."""
        ...

    @property
    def partition_count(self) -> int:
        """The app's job streams."""
        ...

    def job_partition(self, queue: str, job_id: str) -> int:
        """The partition job ``job_id`` of ``queue`` is stored in."""
        ...

    def stream_specs(self, server_version: tuple[int, ...]) -> list[StreamSpec]:
        """Every stream of the app on a server of ``server_version``."""
        ...

    def final_state_specs(self, server_version: tuple[int, ...]) -> list[ConsumerSpec]:
        """The consumers of the app's final-state handlers."""
        ...

    async def provision_streams(self, conn: Connection) -> list[ReplicasDiffer]:
        """Create or update the app's streams."""
        ...
