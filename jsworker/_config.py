"""Declaring options once: a dataclass field carries its default, help, environment variable and
command-line flag, and everything else (``App`` keywords, ``JSWORKER_*`` fallbacks, click
options, the checks that they agree) is derived from the fields.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import time
from collections.abc import Iterator, Mapping
from typing import Any

from ._errors import ConfigurationError

ENV_PREFIX = "JSWORKER_"


def option(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    env: str | None = None,
    flag: str | None = None,
    minimum: float | None = None,
    default_factory: Any = dataclasses.MISSING,
    repr: bool = True,
) -> Any:
    """A dataclass field with its ``help``, the ``JSWORKER_<env>`` variable it falls back to
    and the command-line ``flag`` that sets it (either may be None; a flag may have a short
    form after a space: ``"--concurrency -c"``). ``minimum`` bounds a number given as a flag."""
    metadata = {"help": help, "env": env, "flag": flag, "minimum": minimum}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata, repr=repr)
    return dataclasses.field(default=default, metadata=metadata, repr=repr)


def option_fields(cls: type) -> Iterator[dataclasses.Field[Any]]:
    """The fields of ``cls`` declared with :func:`option`."""
    for f in dataclasses.fields(cls):
        if "help" in f.metadata:
            yield f


def env_name(f: dataclasses.Field[Any]) -> str | None:
    """The environment variable of an option field, or None."""
    env = f.metadata.get("env")
    return f"{ENV_PREFIX}{env}" if env else None


def from_environment(cls: type, given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` plus, for every option of ``cls`` not in it (or None there), the value of its
    environment variable when that is set and not empty."""
    values = {k: v for k, v in given.items() if v is not None}
    for f in option_fields(cls):
        name = env_name(f)
        if f.name not in values and name is not None and os.environ.get(name):
            values[f.name] = os.environ[name]
    return values


def parse_number(
    what: str, value: object, kind: type[int] | type[float], error: type[Exception] = ConfigurationError
) -> object:
    """``value`` as ``kind`` when it is a string (a ``JSWORKER_*`` variable's value), else as it
    is for the caller's own checks; ``error`` naming the option when the string is no number."""
    if not isinstance(value, str):
        return value
    try:
        return kind(value.strip())
    except ValueError:
        expected = "an int" if kind is int else "a number of seconds"
        raise error(f"{what} must be {expected}, not {value!r}") from None


_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# 8GB and 8GiB as nats-server writes them, 8Gi as Kubernetes does: all powers of 1024.
_SIZE = re.compile(r"(-?\d+)\s*([KMGT]?)(?:I?B|I)?", re.IGNORECASE)


def parse_size(what: str, value: object) -> int:
    """A byte count from an int or a string such as ``512MB`` or ``1GiB`` (units are powers of
    1024, as in nats-server's configuration); -1 means no limit. ConfigurationError otherwise."""
    size: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif isinstance(value, str):
        match = _SIZE.fullmatch(value.strip())
        if match:
            size = int(match[1]) * _SIZE_UNITS[match[2].upper()]
    if size is None or (size < 1 and size != -1):
        raise ConfigurationError(f"{what} must be a size in bytes > 0 (or -1 for no limit), not {value!r}")
    return size


def check_seconds(what: str, value: object, *, positive: bool = True) -> float:
    """``value`` as float seconds; ConfigurationError unless a finite number > 0 (or >= 0)."""
    bad = ConfigurationError(f"{what} must be a number {'>' if positive else '>='} 0, not {value!r}")
    seconds = _finite(value)
    if seconds is None or seconds < 0 or (positive and seconds == 0):
        raise bad
    return seconds


def _finite(value: object) -> float | None:
    """``value`` as a finite float; None for anything else (a bool, NaN, an infinity, or an
    int too large for a float, which ``float()`` would answer with OverflowError)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return None
    return seconds if math.isfinite(seconds) else None


#: The latest time a job may be due or expire, in unix milliseconds: the last millisecond of
#: year 9999 (UTC). The server reads an ``@at`` time as RFC 3339, whose years have four digits
#: (``@at 10000-...`` is refused), and Python's ``datetime`` ends there too.
LATEST_MS = 253_402_300_799_999
LATEST_TEXT = "9999-12-31T23:59:59.999Z"


def check_ahead(what: str, value: object, *, positive: bool = True, now: float | None = None) -> float:
    """``value`` as float seconds counted from ``now`` (default: the current time), for a job's
    ``countdown`` or ``expires``; ConfigurationError naming ``what`` and the allowed range unless
    a finite number > 0 (>= 0 without ``positive``) whose end, rounded up to the millisecond,
    is no later than :data:`LATEST_MS`."""
    now = time.time() if now is None else now
    room = LATEST_MS / 1000 - now
    low = ">" if positive else ">="
    bad = ConfigurationError(
        f"{what} must be a number of seconds {low} 0 and at most {math.floor(room)} (it must end "
        f"by {LATEST_TEXT}: no later time exists for the server's @at schedules, nor for Python's "
        f"datetime), not {value!r:.100}"
    )
    seconds = _finite(value)
    # Compared before any multiplication: a huge finite value would overflow to infinity.
    if seconds is None or seconds < 0 or (positive and seconds == 0) or seconds > room:
        raise bad
    # Due times are rounded up to the millisecond: one within a millisecond of the end would
    # round past it.
    if math.ceil((now + seconds) * 1000) > LATEST_MS:
        raise bad
    return seconds
