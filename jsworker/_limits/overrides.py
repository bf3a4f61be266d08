"""A queue's limits changed at run time (from the dashboard, or by an operator through
:class:`~jsworker.admin.Admin`), without a deploy.

They are kept on the server, in the metadata of the queue's consumers (one on the stream of
each partition): ``jsw_max_running`` (a number; ``0`` for no limit of the queue's own) and
``jsw_rate_limit`` (``"50/s"``, or ``none``). A worker writes them, asked to, with its own
grants: the users that ask may not change a consumer, whose other settings (its filter, its
ack policy) decide which jobs run and how often. Provisioning keeps them (see
:func:`~jsworker.jetstream.topology.apply_consumer`; a worker writes them with
:func:`~jsworker._core.provisioning.set_queue_limits`), so the next deploy does not undo what an
operator changed during an incident; setting one back to :data:`DECLARED` puts back what the
code declares.

``max_running`` is the consumer's ``max_ack_pending``: the server applies it at once.
Workers read the rate with the queue figures they read every few seconds
(``--stats-interval``) and count starts under it from then on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from .._errors import ConfigurationError
from .._observability.logging import get_logger
from ..jetstream.topology import SET_MAX_ACK_PENDING
from .spec import Rate, parse_rate

if TYPE_CHECKING:
    from .rates import RateLimiter

log = get_logger("jsworker.flow")

#: The value that puts a limit back to what the code declares.
DECLARED = "declared"
#: A rate limit's value for none at all.
NO_LIMIT = "none"
_RATE_LIMIT = "jsw_rate_limit"
# The largest max_running: the server keeps max_ack_pending in 32 bits.
_MOST = 2**31 - 1
#: The limits a queue's consumers keep, by the name an override is given (and
#: :attr:`~jsworker.admin.QueueStatus.overrides` shows).
KEYS = {"max_running": SET_MAX_ACK_PENDING, "rate_limit": _RATE_LIMIT}


class QueueLayout(Protocol):
    """What the checks read of an app: its queues and how many streams each spans."""

    @property
    def queues(self) -> list[str]: ...

    def queue_streams(self, queue: str) -> int: ...


class Overridden(Protocol):
    """A queue's figures as the worker reads them (a ``QueueStatus``): its name, and its
    limits set at run time."""

    @property
    def queue(self) -> str: ...

    @property
    def overrides(self) -> dict[str, str]: ...


def queue_rate(declared: Rate | None, overrides: Mapping[str, str]) -> Rate | None:
    """A queue's rate limit: the one set at run time (``overrides``, as
    :attr:`~jsworker.admin.QueueStatus.overrides` has them) or, without one, ``declared``."""
    text = overrides.get("rate_limit")
    if text is None:
        return declared
    if text == NO_LIMIT:
        return None
    try:
        return parse_rate(text)
    except ConfigurationError:
        return declared  # not written by jsworker: the code's limit holds


def check_limits(app: QueueLayout, queue: str, asked: Mapping[str, Any]) -> dict[str, str]:
    """The overrides ``asked`` (``max_running``, ``rate_limit``; absent or None: as they are)
    for a declared ``queue``, checked, as the values stored; ConfigurationError otherwise."""
    if queue not in app.queues:
        raise ConfigurationError(
            f"the app declares no queue {queue!r:.80} (its queues: {', '.join(app.queues)})"
        )
    unknown = set(asked) - set(KEYS)
    if unknown:
        raise ConfigurationError(f"unknown limits {sorted(unknown)!r:.120}: a queue has {sorted(KEYS)}")
    stored: dict[str, str] = {}
    running = asked.get("max_running")
    if running is not None and running != DECLARED:
        if isinstance(running, bool) or not isinstance(running, int) or not 0 <= running <= _MOST:
            raise ConfigurationError(
                f"max_running is a whole number up to {_MOST}, 0 for none, or {DECLARED!r}: "
                f"not {running!r:.40}"
            )
        if app.queue_streams(queue) > 1:
            raise ConfigurationError(
                f"queue {queue!r} is spread over {app.queue_streams(queue)} partitions: a "
                "max_running holds only for a queue of one (declare it in the code, which makes it one)"
            )
    if running is not None:
        stored["max_running"] = str(running)
    rate = asked.get("rate_limit")
    if rate is not None:
        if rate not in (DECLARED, NO_LIMIT):
            rate = parse_rate(rate, f"queue {queue!r}: rate_limit").text
        stored["rate_limit"] = str(rate)
    if not stored:
        raise ConfigurationError("nothing to change: give max_running or rate_limit")
    return stored


class RateFollower:
    """Keeps a worker's queue rate limiters (``rates``, by queue: what its pull loops read
    before each start) as the queue figures it reads say (:meth:`follow`): a limit set at run
    time replaces the code's, ``none`` removes it, and one set back puts the code's back."""

    def __init__(
        self,
        rates: dict[str, RateLimiter],
        declared: Mapping[str, Rate | None],
        make: Callable[[str, Rate], RateLimiter],
    ) -> None:
        self._rates = rates
        self._declared = declared
        self._make = make

    def follow(self, statuses: Iterable[Overridden]) -> None:
        """Apply the rates of ``statuses`` (of the queues this worker serves only)."""
        for status in statuses:
            queue = status.queue
            if queue not in self._declared:
                continue
            rate = queue_rate(self._declared[queue], status.overrides)
            limiter = self._rates.get(queue)
            if rate is None:
                if self._rates.pop(queue, None) is not None:
                    log.info("queue.rate_limit_changed", queue=queue, rate_limit=None)
            elif limiter is None:
                self._rates[queue] = self._make(queue, rate)
                log.info("queue.rate_limit_changed", queue=queue, rate_limit=rate.text)
            elif limiter.rate != rate:
                # Counted from its next start on: a window's starts are counted under one rate.
                limiter.rate = rate
                log.info("queue.rate_limit_changed", queue=queue, rate_limit=rate.text)
