"""Who a job fired by a schedule is: its job id and its due time, the same for every copy of
one firing, so that a firing the server doubled can be told apart from the next tick."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Literal, NamedTuple

from .._errors import ConfigurationError
from .._wire.headers import FIRED_NEXT, JOB_ID, SCHEDULE_NAME, SCHEDULE_SPEC, SCHEDULE_ZONE, SCHEDULED_FOR
from .cron import Cron, duration_seconds, zone

#: ``unbound``: fired by a schedule, but its headers do not say which job it is (a schedule
#: jsworker did not write); a worker refuses it.
FiredKind = Literal["delayed", "periodic", "unbound"]


class Firing(NamedTuple):
    """A fired job's identity: ``job_id``, ``due_ms`` (when it was due, unix milliseconds)
    and whether a delayed job or a periodic schedule fired it (or ``unbound``)."""

    job_id: str
    due_ms: int
    kind: FiredKind


def tick_job_id(name: str, due_ms: int) -> str:
    """The job id of the tick of schedule ``name`` due at ``due_ms``:
    ``<name>-<YYYYmmddTHHMMSS>Z`` in UTC (milliseconds before the ``Z`` when not whole)."""
    when = datetime.fromtimestamp(due_ms // 1000, UTC)
    millis = due_ms % 1000
    return f"{name}-{when:%Y%m%dT%H%M%S}{f'{millis:03d}' if millis else ''}Z"


def firing(headers: Mapping[str, str]) -> Firing | None:
    """The identity of a job the server fired, from its headers as moved into its queue
    (``Jsw-Fired-By``, ``Jsw-Fired-Next``; see :mod:`.relay`); None when they do not say enough
    (a schedule jsworker did not write).

    A delayed job carries its own id and due time. A tick carries the schedule's name and
    expression and, from the server, the time of the *next* tick: its own due time is the
    last fire time before that one, which every copy of the same tick agrees on.
    """
    job_id = headers.get(JOB_ID)
    due = headers.get(SCHEDULED_FOR)
    if job_id is not None and due is not None and due.isdigit():
        return Firing(job_id, int(due), "delayed")
    name, spec, following = headers.get(SCHEDULE_NAME), headers.get(SCHEDULE_SPEC), headers.get(FIRED_NEXT)
    if not name or not spec or not following:
        return None
    try:
        after = datetime.fromisoformat(following)
        if spec.startswith("@every "):
            tick = after - timedelta(seconds=duration_seconds(spec[7:]))
        else:
            found = Cron.parse(spec).previous_before(after, zone(headers.get(SCHEDULE_ZONE)))
            if found is None:
                return None
            tick = found
    except (ValueError, ConfigurationError):
        return None
    due_ms = math.floor(tick.timestamp() * 1000)
    return Firing(tick_job_id(name, due_ms), due_ms, "periodic")
