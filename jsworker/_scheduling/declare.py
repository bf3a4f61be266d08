"""What an app declares about time: when a delayed job is due, and its periodic schedules."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, cast

from .._config import check_seconds
from .._core.layout import SCHEDULES_SINCE
from .._core.serializers import encode_call
from .._core.view import AppView
from .._errors import ConfigurationError
from .._wire.headers import check_headers
from .._wire.names import validate_name
from .cron import Cron, check_zone, every_seconds, go_duration, quoted

if TYPE_CHECKING:
    from .._enqueue.task import Task

#: nats-server versions that store and fire schedules: ``@at`` (delayed jobs) and the
#: repeating forms with time zones (periodic schedules).
DELAYED_SINCE = SCHEDULES_SINCE
PERIODIC_SINCE = (2, 14, 0)


def at_expression(due: datetime) -> str:
    """The ``Nats-Schedule`` value firing once at ``due`` (UTC, to the microsecond)."""
    return "@at " + due.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


#: A tick expires once the next tick of its schedule is due (the default), or never.
NEXT_TICK, NEVER = "next", "never"


@dataclass(frozen=True, slots=True)
class Schedule:
    """One periodic schedule of an app: ``task`` is enqueued with ``args``/``kwargs`` on
    every tick of ``cron`` (in ``tz``) or every ``every`` seconds. ``name`` is unique in the
    app; it names the schedule on the server and starts the job id of each tick."""

    name: str
    task: str
    queue: str
    cron: str | None = None
    every: float | None = None
    tz: str | None = None
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    body: bytes = b""
    #: When a tick not started yet is no longer run (see :func:`tick_expiry`).
    expires: str = NEXT_TICK
    #: For a unique task: the job id its ticks' key gives, which their subject ends in, so
    #: that the server refuses another job of that key while a tick waits or runs.
    job_id: str | None = None
    #: The caller's own headers, carried by every tick.
    headers: Mapping[str, str] = field(default_factory=dict)
    #: False: switched off in code; workers starting with it pause it (see sync_schedules).
    enabled: bool = True

    @property
    def expression(self) -> str:
        """The ``Nats-Schedule`` value: a six-field cron or ``@every <duration>``."""
        if self.cron is not None:
            return Cron.parse(self.cron).expression
        assert self.every is not None
        return f"@every {go_duration(self.every)}"

    @property
    def digest(self) -> str:
        """A fingerprint of everything that makes the schedule fire differently: equal digests
        mean the one on the server need not be touched."""
        h = hashlib.sha256()
        # The default expiry adds nothing: schedules installed before it existed keep their digest.
        extra = (() if self.expires == NEXT_TICK else (self.expires,)) + (
            () if self.job_id is None else (self.job_id,)
        )
        extra += tuple(f"{k}: {v}" for k, v in sorted(self.headers.items()))
        extra += () if self.enabled else ("off",)
        for part in (self.task, self.queue, self.expression, self.tz or "", *extra):
            h.update(part.encode())
            h.update(b"\0")
        h.update(self.body)
        return h.hexdigest()[:32]


def tick_expiry(name: str, expires: timedelta | float | str | None, task_expires: float | None) -> str:
    """How ticks of schedule ``name`` expire, as their header says it: ``expires`` seconds
    after they were due (a number or timedelta), :data:`NEXT_TICK` or :data:`NEVER`; None
    takes the task's own ``expires`` if it has one, else :data:`NEXT_TICK`."""
    if expires is None:
        expires = task_expires if task_expires is not None else NEXT_TICK
    if expires in (NEXT_TICK, NEVER):
        return str(expires)
    if isinstance(expires, str):
        raise ConfigurationError(
            f"schedule {name!r}: expires must be seconds, 'next' or 'never', not {expires!r}"
        )
    seconds = expires.total_seconds() if isinstance(expires, timedelta) else expires
    try:
        return repr(float(check_seconds("expires", seconds)))
    except ConfigurationError as exc:
        raise ConfigurationError(f"schedule {name!r}: {exc}") from None


def tick_limit(expires: str | None, due_ms: int, next_due: datetime | None) -> float | None:
    """When a tick due at ``due_ms`` that has not started expires (unix seconds), from its
    schedule's ``expires`` header (missing: :data:`NEXT_TICK`) and the time of the schedule's
    next tick; None for never (or not known)."""
    if expires is None or expires == NEXT_TICK:
        return next_due.timestamp() if next_due is not None else None
    if expires == NEVER:
        return None
    try:
        return due_ms / 1000 + float(expires)
    except ValueError:
        return None


def check_schedule_form(
    name: str, cron: str | None, every: timedelta | float | None, tz: str | None
) -> tuple[str | None, float | None]:
    """The checked ``(cron, every seconds)`` of a declaration; ConfigurationError naming the
    schedule for what the server would refuse: a bad expression, a cron with no fire time in
    the next five years, an interval under 1 second or over :data:`~.cron.MAX_EVERY`, an
    unknown zone or one meaning the server host's local time (nothing is sent)."""
    if (cron is None) == (every is None):
        raise ConfigurationError(f"schedule {name!r}: give cron=... or every=..., exactly one")
    try:
        where = check_zone(tz)
        if cron is not None:
            if Cron.parse(cron).next_after(datetime.now(UTC), where) is None:
                # The server looks as far (to the end of the fifth year from now) and refuses
                # the schedule as an invalid pattern when nothing matches.
                raise ConfigurationError(
                    f"cron {quoted(cron)} never fires: no time in the next five years matches it "
                    "(such as February 30th), and the server refuses such a schedule"
                )
            return cron, None
        if tz is not None:
            raise ConfigurationError("tz applies to cron schedules only (every= is a plain interval)")
        assert every is not None
        return None, every_seconds(every)
    except ConfigurationError as exc:
        raise ConfigurationError(f"schedule {name!r}: {exc}") from None


def args_tuple(name: str, args: Sequence[Any]) -> tuple[Any, ...]:
    """``args`` as a tuple; TypeError for a string or a non-sequence."""
    if isinstance(args, str | bytes) or not isinstance(args, Sequence):
        raise TypeError(f"schedule {name!r}: args must be a sequence (a tuple or list), not {args!r:.100}")
    return tuple(args)


def build_schedule(
    app: AppView,
    task: Task[Any, Any],
    name: str,
    *,
    cron: str | None,
    every: timedelta | float | None,
    tz: str | None,
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None,
    expires: timedelta | float | str | None,
    headers: Mapping[str, str] | None,
    enabled: bool,
) -> Schedule:
    """The checked :class:`Schedule` named ``name`` of ``task`` (see ``App.schedule``);
    ConfigurationError or TypeError naming it for anything wrong (nothing is sent)."""
    cron_text, seconds = check_schedule_form(name, cron, every, tz)
    try:
        own = check_headers(headers or {})
    except ValueError as exc:
        raise ConfigurationError(f"schedule {name!r}: {exc}") from None
    # The app's middleware sees the schedule once, here: what it adds rides with every tick.
    call = task.make_call(args_tuple(name, args), kwargs, None, headers=own or None, schedule=name)
    return Schedule(
        name=name,
        task=task.name,
        queue=task.queue,
        cron=cron_text,
        every=seconds,
        tz=tz,
        args=call.args,
        kwargs=call.kwargs,
        body=encode_call(app.serializer, call.args, call.kwargs, signature=task.signature),
        expires=tick_expiry(name, expires, task.options.expires),
        # A unique task's ticks all have its key: fixed, since the arguments are.
        job_id=call.job_id if call.unique else None,
        headers=dict(call.headers or {}),
        enabled=bool(enabled),
    )


class SchedulingApp(AppView, Protocol):
    """An app as its periodic schedules see it: an :class:`~jsworker._core.view.AppView` with the
    schedules it declares (``app.schedule``, ``@app.task(cron=...)``), by name."""

    @property
    def schedules(self) -> Mapping[str, Schedule]: ...


#: The fields of a schedule made at run time (:func:`schedule_of`), as a dashboard sends them.
SPEC_FIELDS = ("task", "cron", "every", "tz", "args", "kwargs")


def schedule_of(app: SchedulingApp, name: str, spec: Mapping[str, Any]) -> Schedule:
    """The checked :class:`Schedule` ``name`` that ``spec`` describes (its :data:`SPEC_FIELDS`:
    a declared task's name, ``cron`` or ``every`` seconds, ``tz``, JSON ``args`` and
    ``kwargs``), as ``App.schedule`` would declare it; ConfigurationError or TypeError naming
    what is wrong. A schedule the code declares is refused: workers put the code's back at
    start, so it is changed in the code."""
    if name in app.schedules:
        raise ConfigurationError(
            f"schedule {name!r} is declared in the code: change it there (workers install the "
            "code's at start)"
        )
    unknown = set(spec) - set(SPEC_FIELDS)
    if unknown:
        raise ConfigurationError(f"schedule {name!r}: unknown fields {', '.join(sorted(unknown))}")
    task_name = spec.get("task")
    task = app.tasks.get(task_name) if isinstance(task_name, str) else None
    if task is None:
        raise ConfigurationError(f"schedule {name!r}: no task {task_name!r} in app {app.name}")
    every = spec.get("every")
    if every is not None and (isinstance(every, bool) or not isinstance(every, int | float)):
        raise ConfigurationError(f"schedule {name!r}: every must be seconds, not {every!r:.40}")
    kwargs = spec.get("kwargs") or {}
    if not isinstance(kwargs, dict):
        raise TypeError(f"schedule {name!r}: kwargs must be an object, not {kwargs!r:.100}")
    return build_schedule(
        app,
        cast("Task[Any, Any]", task),
        validate_name("schedule", name),
        cron=spec.get("cron") or None,
        every=every,
        tz=spec.get("tz") or None,
        args=spec.get("args") or (),
        kwargs=kwargs,
        expires=None,
        headers=None,
        enabled=True,
    )
