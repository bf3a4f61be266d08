"""App-wide settings of the streams and the producers, and the keyword arguments of ``App(...)``
sorted among the three kinds of options they set."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypedDict

from .._config import check_seconds, option, option_fields, parse_number, parse_size
from .._errors import ConfigurationError
from .._limits.spec import Rate
from .._wire.names import MAX_PARTITIONS
from ..jetstream.connection import ConnectOptions
from .task_options import ExceptionTypes, ExecutorKind, TaskOptions

_DAY = 86400.0
_GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class AppOptions:
    """App-wide settings of the streams and the producers (task defaults are :class:`TaskOptions`,
    connection settings :class:`ConnectOptions`). Checked on construction."""

    duplicate_window: float = option(
        120.0, help="Seconds the job stream remembers a job id: an enqueue repeated within it is dropped."
    )
    replicas: int = option(
        1,
        env="REPLICAS",
        flag="--replicas",
        minimum=1,
        help="Replicas of every stream the app creates (3 in a production cluster; consumers follow "
        "their stream). An existing stream keeps its replicas: a worker only warns when they differ.",
    )
    dlq_max_age: float = option(7 * _DAY, env="DLQ_MAX_AGE", help="Seconds dead letters are kept.")
    dlq_max_bytes: int = option(
        _GIB,
        env="DLQ_MAX_BYTES",
        help="Bytes the dead-letter stream may hold (-1: no limit); past it the oldest letters go. "
        "Accepts units as nats-server does (512MB, 1GB = 1024^3 bytes).",
    )
    events: bool = option(False, help="Producers and workers publish job events.")
    events_max_age: float = option(7 * _DAY, env="EVENTS_MAX_AGE", help="Seconds job events are kept.")
    events_max_bytes: int = option(
        _GIB,
        env="EVENTS_MAX_BYTES",
        help="Bytes the job-event stream may hold (-1: no limit); past it the oldest events go.",
    )
    final_states: bool = option(
        False,
        help="Every job's final state is stored as its record before its ack, so handlers declared "
        "with @app.on_final_state hear each job at least once (a record write per job).",
    )
    spark_sinks: bool = option(
        False,
        help="Spark streaming sinks write to the app: its streams include the record of each "
        "micro-batch they committed, so a replayed batch makes no second job.",
    )
    max_ack_pending: int = option(
        20_000,
        help="Jobs a queue may have delivered and not yet settled, across all workers (in each "
        "of its partitions).",
    )
    partitions: int = option(
        1,
        help="Job streams each queue's jobs are spread over by job id, each with a leader of its "
        "own: past one stream leader's writes per second (a queue declared with max_running or "
        "fair keeps one). Producers and workers must agree on it: it belongs in the app's code.",
    )
    previous_partitions: int | None = option(
        None,
        help="While the app's partitions change: the count before, whose layout its jobs may still "
        "be in. Workers pull those partitions too and lookups find jobs there until they drain "
        "(`jsworker doctor` shows how many are left).",
    )
    publish_timeout: float = option(
        15.0,
        env="PUBLISH_TIMEOUT",
        help="Seconds one enqueue keeps trying through a restart or an election (a web process "
        "that must not wait that long sets less).",
    )
    validate_arguments: bool = option(
        True,
        help="Check annotated task arguments at enqueue and convert them back to their types at run.",
    )
    workflows: bool = option(
        False, help="Chains, groups and chords: workers advance them (nats-server 2.12+)."
    )
    workflow_ttl: float = option(
        7 * _DAY, env="WORKFLOW_TTL", help="Seconds a workflow's state is kept after its last step."
    )

    def __post_init__(self) -> None:
        # Values from JSWORKER_* variables arrive as strings.
        for what in ("duplicate_window", "dlq_max_age", "events_max_age", "publish_timeout", "workflow_ttl"):
            object.__setattr__(
                self, what, check_seconds(what, parse_number(what, getattr(self, what), float))
            )
        for what in ("replicas", "max_ack_pending"):
            value = parse_number(what, getattr(self, what), int)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigurationError(f"{what} must be an int >= 1, not {value!r}")
            object.__setattr__(self, what, value)
        check_partitions("partitions", self.partitions)
        if self.previous_partitions is not None:
            check_partitions("previous_partitions", self.previous_partitions)
        for what in ("dlq_max_bytes", "events_max_bytes"):
            object.__setattr__(self, what, parse_size(what, getattr(self, what)))
        object.__setattr__(self, "events", bool(self.events))
        object.__setattr__(self, "final_states", bool(self.final_states))
        object.__setattr__(self, "spark_sinks", bool(self.spark_sinks))
        object.__setattr__(self, "validate_arguments", bool(self.validate_arguments))
        object.__setattr__(self, "workflows", bool(self.workflows))


@dataclass(frozen=True, slots=True)
class QueueOptions:
    """How one queue is served (``app.queue(...)``).

    ``max_running`` caps the jobs of the queue that run at once across every worker process
    and machine: the server's ``max_ack_pending`` on the queue's consumer, so jobs a worker has
    pulled and not yet settled count too (None: the app's ``max_ack_pending``). ``priority``
    orders the queues one worker serves: a freed slot goes to the highest-priority queue with
    a job waiting.
    """

    max_running: int | None = None
    priority: int = 0
    #: Job starts allowed across every worker (see :mod:`jsworker._limits.rates`), None: no limit.
    rate_limit: Rate | None = None
    #: Partitions take turns (see :mod:`jsworker._limits.fair`).
    fair: bool = False
    #: Job streams the queue's jobs are spread over (None: the app's ``partitions``, or 1 for a
    #: queue with ``max_running`` or ``fair``, which the server enforces on one consumer).
    partitions: int | None = None
    #: While ``partitions`` changes: the count before (see ``AppOptions.previous_partitions``).
    previous_partitions: int | None = None

    def __post_init__(self) -> None:
        if self.max_running is not None and (
            not isinstance(self.max_running, int)
            or isinstance(self.max_running, bool)
            or self.max_running < 1
        ):
            raise ConfigurationError(f"max_running must be an int >= 1 or None, not {self.max_running!r}")
        if not isinstance(self.priority, int) or isinstance(self.priority, bool):
            raise ConfigurationError(f"priority must be an int, not {self.priority!r}")
        if self.previous_partitions is not None:
            check_partitions("previous_partitions", self.previous_partitions)
        if self.partitions is not None:
            check_partitions("partitions", self.partitions)
            if self.partitions > 1 and (self.fair or self.max_running is not None):
                # Both are one consumer's doing: max_ack_pending, and the fair mover's turns.
                raise ConfigurationError(
                    f"a queue with {'fair turns' if self.fair else 'max_running'} has one partition, "
                    f"not {self.partitions}: the server enforces it on one stream's consumer"
                )


def check_partitions(what: str, value: object) -> None:
    """Raise unless ``value`` is a partition count: an int from 1 to :data:`MAX_PARTITIONS`."""
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_PARTITIONS:
        raise ConfigurationError(f"{what} must be an int from 1 to {MAX_PARTITIONS}, not {value!r}")


class AppArguments(TypedDict, total=False):
    """The keyword arguments of :class:`App`: every field of :class:`TaskOptions` (``queue``
    spelled ``default_queue``), :class:`AppOptions` and :class:`ConnectOptions`'s user-facing
    ones. A test checks this list against those classes."""

    default_queue: str
    max_retries: int
    max_crashes: int
    timeout: float | None
    ack_wait: float
    retry_backoff: float
    retry_backoff_max: float
    retry_on: ExceptionTypes
    dont_retry_on: ExceptionTypes
    results: bool
    result_ttl: float
    expires: float | None
    executor: ExecutorKind
    duplicate_window: float
    replicas: int
    dlq_max_age: float
    dlq_max_bytes: int
    events: bool
    events_max_age: float
    events_max_bytes: int
    final_states: bool
    spark_sinks: bool
    max_ack_pending: int
    partitions: int
    previous_partitions: int | None
    publish_timeout: float
    validate_arguments: bool
    workflows: bool
    workflow_ttl: float
    user: str | None
    password: str | None
    token: str | None
    credentials: str | None
    nkey_seed: str | None
    tls_ca: str | None
    tls_cert: str | None
    tls_key: str | None
    inbox_prefix: str | None
    connect_timeout: float
    attempt_timeout: float
    reconnect_wait: float


# App keywords that name a field of another class.
ALIASES = {"default_queue": "queue", "results": "store_result"}


def split_arguments(arguments: dict[str, Any]) -> dict[type, dict[str, Any]]:
    """The App's keyword arguments sorted by the class whose field each names."""
    owners = (TaskOptions, AppOptions, ConnectOptions)
    split: dict[type, dict[str, Any]] = {owner: {} for owner in owners}
    fields = {f.name: owner for owner in owners for f in option_fields(owner)}
    for key, value in arguments.items():
        name = ALIASES.get(key, key)
        owner = fields.get(name)
        if owner is None or key == "queue":
            raise TypeError(f"App() got an unexpected keyword argument {key!r}")
        split[owner][name] = value
    return split
