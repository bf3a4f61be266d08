"""App-wide settings of the streams and the producers."""

from __future__ import annotations

from dataclasses import dataclass

from .config import check_seconds, option, parse_number, parse_size
from .errors import ConfigurationError

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
    max_ack_pending: int = option(
        20_000, help="Jobs a queue may have delivered and not yet settled, across all workers."
    )
    publish_timeout: float = option(
        15.0, help="Seconds one enqueue keeps trying through a restart or an election."
    )
    validate_arguments: bool = option(
        True,
        help="Check annotated task arguments at enqueue and convert them back to their types at run.",
    )

    def __post_init__(self) -> None:
        # Values from JSWORKER_* variables arrive as strings.
        for what in ("duplicate_window", "dlq_max_age", "events_max_age", "publish_timeout"):
            object.__setattr__(
                self, what, check_seconds(what, parse_number(what, getattr(self, what), float))
            )
        for what in ("replicas", "max_ack_pending"):
            value = parse_number(what, getattr(self, what), int)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigurationError(f"{what} must be an int >= 1, not {value!r}")
            object.__setattr__(self, what, value)
        for what in ("dlq_max_bytes", "events_max_bytes"):
            object.__setattr__(self, what, parse_size(what, getattr(self, what)))
        object.__setattr__(self, "events", bool(self.events))
        object.__setattr__(self, "validate_arguments", bool(self.validate_arguments))


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

    def __post_init__(self) -> None:
        if self.max_running is not None and (
            not isinstance(self.max_running, int)
            or isinstance(self.max_running, bool)
            or self.max_running < 1
        ):
            raise ConfigurationError(f"max_running must be an int >= 1 or None, not {self.max_running!r}")
        if not isinstance(self.priority, int) or isinstance(self.priority, bool):
            raise ConfigurationError(f"priority must be an int, not {self.priority!r}")
