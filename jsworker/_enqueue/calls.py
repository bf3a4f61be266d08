"""One job to enqueue, as a task makes it and the producer stores it (:class:`Call`): the ids
it may carry and when it is due."""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, TypeGuard

from .._config import LATEST_MS, LATEST_TEXT, check_ahead
from .._errors import ConfigurationError

#: One item of a bulk enqueue: positional arguments as a tuple, or keyword arguments as a dict.
CallArgs = tuple[Any, ...] | Mapping[str, Any]


class Call(NamedTuple):
    """One job to enqueue: its arguments, its id, when it is due (None: now), when it expires
    (unix milliseconds, None: never), whether it is unique (its id derived from its key), the
    queue it goes to when not its task's, the caller's own headers, and whether the caller
    chose its id."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    job_id: str
    due: datetime | None = None
    expires_at: int | None = None
    unique: bool = False
    queue: str | None = None
    headers: Mapping[str, str] | None = None
    #: The caller chose the job id: no second job with it while one waits or runs.
    explicit_id: bool = False


_JOB_ID = re.compile(r"[A-Za-z0-9_=-]{1,128}")


def is_job_id(value: object) -> TypeGuard[str]:
    """Whether ``value`` can be a job's id (see :func:`check_job_id`)."""
    return isinstance(value, str) and _JOB_ID.fullmatch(value) is not None


def check_job_id(job_id: object) -> str:
    """``job_id`` if it is a valid job id, else :class:`ConfigurationError`.

    A job id is 1 to 128 letters, digits, ``_``, ``-`` or ``=``: it is sent as a header and
    becomes part of key and subject names on the server, where dots, wildcards, spaces and
    ``:`` (jsworker's own separator in dedup keys) would split or widen them.
    """
    if not is_job_id(job_id):
        raise ConfigurationError(
            f"invalid job_id {job_id!r:.140}: use 1-128 letters, digits, '_', '-' or '=' "
            "(no dots, spaces, ':', '*' or '>')"
        )
    return job_id


def new_job_id() -> str:
    """A random job id: 128 random bits as 32 hex digits (``uuid.uuid4().hex`` costs twice as much)."""
    return os.urandom(16).hex()


def due_time(countdown: float | None, eta: datetime | None) -> datetime | None:
    """When a job asked to wait ``countdown`` seconds or until ``eta`` becomes runnable (UTC,
    rounded up to the millisecond the server is told), None for a job that runs now (neither
    given, a zero countdown or an ``eta`` already past). Either must end by
    :data:`~jsworker._config.LATEST_MS` (the end of year 9999): ConfigurationError naming the
    argument and that range otherwise."""
    if countdown is not None and eta is not None:
        raise ConfigurationError("give countdown or eta, not both")
    now = time.time()
    if countdown is not None:
        if check_ahead("countdown", countdown, positive=False, now=now) == 0:
            return None
        return _at_ms(math.ceil((now + countdown) * 1000))
    if eta is None:
        return None
    if not isinstance(eta, datetime):
        raise ConfigurationError(f"eta must be a datetime, not {type(eta).__name__}")
    if eta.tzinfo is None or eta.utcoffset() is None:
        raise ConfigurationError(
            f"eta {eta.isoformat()} has no time zone: pass an aware datetime, such as "
            "datetime.now(timezone.utc) + timedelta(...)"
        )
    # In integers: a float timestamp near year 9999 is only good to some 30 microseconds, and
    # an eta written in a zone west of UTC may lie past 9999-12-31 in UTC (where no datetime is).
    since = eta - _EPOCH
    due_us = (since.days * 86400 + since.seconds) * 1_000_000 + since.microseconds
    due_ms = -(-due_us // 1000)
    if due_ms > LATEST_MS:
        raise ConfigurationError(
            f"eta must be no later than {LATEST_TEXT} (rounded up to the millisecond: no later "
            f"time exists for the server's @at schedules, nor for Python's datetime), not {eta.isoformat()}"
        )
    return _at_ms(due_ms) if due_us > now * 1_000_000 else None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _at_ms(due_ms: int) -> datetime:
    # Rounded up by the caller: a job fires at or after the time its producer asked for, never
    # a fraction before. Built without floats, so the millisecond is exact.
    return _EPOCH + timedelta(milliseconds=due_ms)
