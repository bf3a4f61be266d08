"""Rates: ``"100/s"``, ``"50/m"``, ``"10/h"``, checked where they are declared; and the
partition a job counts against (``partition_key``), which producers and workers both read."""

from __future__ import annotations

import hashlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._errors import ConfigurationError

_PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_RATE = re.compile(r"\s*(\d+)\s*/\s*([smh])\s*")
#: The longest partition key (what ``partition_key`` returns).
MAX_KEY = 256
#: A rate's period is cut into at most this many windows, each allowing its share: the
#: burst a rate allows in any period-long stretch is then one window's share.
MAX_WINDOWS = 10


@dataclass(frozen=True, slots=True)
class Rate:
    """``count`` starts per ``period`` seconds."""

    count: int
    period: float
    text: str

    @property
    def windows(self) -> int:
        """How many windows a period is cut into (each allows at least one start)."""
        return min(MAX_WINDOWS, self.count)

    @property
    def window(self) -> float:
        """Seconds one window lasts."""
        return self.period / self.windows

    def share(self, index: int) -> int:
        """Starts window ``index`` (counted from the epoch) allows: the period's count spread
        over its windows, the remainder one at a time, so that every period allows ``count``."""
        i, k = index % self.windows, self.windows
        return (i + 1) * self.count // k - i * self.count // k

    @property
    def burst(self) -> int:
        """One window's largest share: any period-long stretch of time starts at most
        ``count`` plus two of these (see :mod:`jsworker._limits.rates`)."""
        return -(-self.count // self.windows)

    def __str__(self) -> str:
        return self.text


def parse_rate(text: object, what: str = "rate_limit") -> Rate:
    """``text`` (``"N/s"``, ``"N/m"`` or ``"N/h"``, N at least 1) as a :class:`Rate`;
    ConfigurationError naming ``what`` otherwise."""
    match = _RATE.fullmatch(text) if isinstance(text, str) else None
    if match is None or int(match[1]) < 1:
        raise ConfigurationError(
            f"{what} is 'N/s', 'N/m' or 'N/h' with N >= 1 (such as '100/s'), not {text!r}"
        )
    return Rate(int(match[1]), _PERIODS[match[2]], f"{int(match[1])}/{match[2]}")


def partition_limits(
    task: str, key: Callable[..., Any] | None, max_running: object, rate: object
) -> tuple[Callable[..., Any] | None, int | None, Rate | None]:
    """A task's per-partition limits, checked: ``partition_key`` (a function of the task's
    arguments) with ``max_running_per_partition`` (an int >= 1) and/or
    ``rate_limit_per_partition``, or alone (the turns of a fair queue); ConfigurationError
    for anything wrong."""
    if key is None:
        if max_running is not None or rate is not None:
            raise ConfigurationError(
                f"task {task}: per-partition limits need partition_key=, a function of the "
                "task's arguments that returns the partition (such as the account id)"
            )
        return None, None, None
    if not callable(key):
        raise ConfigurationError(
            f"task {task}: partition_key must be a function of the arguments, not {key!r}"
        )
    if max_running is not None and (
        not isinstance(max_running, int) or isinstance(max_running, bool) or max_running < 1
    ):
        raise ConfigurationError(
            f"task {task}: max_running_per_partition must be an int >= 1, not {max_running!r}"
        )
    parsed = parse_rate(rate, f"task {task}: rate_limit_per_partition") if rate is not None else None
    return key, max_running, parsed


def partition_of(
    key_fn: Callable[..., Any], signature: inspect.Signature, args: list[Any], kwargs: dict[str, Any]
) -> str:
    """The partition key ``key_fn`` gives a job's arguments, passed by name (so that
    ``lambda account_id, **_: account_id`` picks one out of them); ValueError saying what is
    wrong with it (a key function that raises, or returns anything but a short string)."""
    try:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        key = key_fn(**bound.arguments)
    except Exception as exc:  # the user's function: any exception is bad input
        raise ValueError(f"partition_key raised {type(exc).__name__}: {exc}") from exc
    if isinstance(key, int) and not isinstance(key, bool):
        key = str(key)
    if not isinstance(key, str) or not key or len(key) > MAX_KEY:
        raise ValueError(f"partition_key must return a string of 1 to {MAX_KEY} characters, not {key!r:.80}")
    return key


def partition_token(key: str) -> str:
    """A subject token (or header value) for partition ``key`` (any characters): a hash of it."""
    return hashlib.blake2b(key.encode(), digest_size=10).hexdigest()
