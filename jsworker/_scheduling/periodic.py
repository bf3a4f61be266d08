"""Periodic schedules on the server: one message per schedule, installed from the app's
declarations and operated by name.

A schedule is a message on ``jsw.<app>.sched.repeat.<name>`` whose ``Nats-Schedule`` the server
fires into the task's queue subject. Every write names the sequence it replaces
(``Nats-Expected-Last-Subject-Sequence``), so processes reconciling at once cannot undo each
other: one write wins, the others re-read and find the schedule as they wanted it. A paused
schedule is the same message without ``Nats-Schedule`` (it rolls the schedule up, so nothing is
left to fire) and with ``Jsw-Paused``; resuming writes the schedule back from it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from .._errors import ConfigurationError
from .._errors import ScheduleNotFound as ScheduleNotFound
from .._errors import ScheduleRefused as ScheduleRefused
from .._errors import SchedulesRefused as SchedulesRefused
from .._errors import SyncReport as SyncReport
from .._wire.headers import (
    CONTENT_TYPE,
    EXPECTED_LAST_SUBJECT_SEQ,
    PAUSED,
    QUEUE,
    ROLLUP,
    SCHEDULE,
    SCHEDULE_DIGEST,
    SCHEDULE_NAME,
    SCHEDULE_SPEC,
    SCHEDULE_TARGET,
    SCHEDULE_TIME_ZONE,
    SCHEDULE_ZONE,
    TASK,
    TICK_EXPIRES,
    caller_headers,
)
from .._wire.names import validate_name
from ..jetstream.inspect import stream_facts
from ..jetstream.limits_stream import LimitsStream, StoredMessage
from ..jetstream.message import OutMessage, PayloadTooLargeError, check_size
from ..jetstream.stored import SubjectMoved, WriteRefused, write
from .cron import Cron, duration_seconds, zone
from .declare import NEXT_TICK, Schedule, SchedulingApp

if TYPE_CHECKING:
    from ..jetstream.connection import Connection

# Writers racing on one schedule settle in one or two rounds; more means something keeps
# rewriting it.
_ROUNDS = 5


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """A periodic schedule as the server holds it.

    ``expression`` is what the server fires on (six-field cron or ``@every``); ``declared``
    says whether the app loaded here declares a schedule of that name (False: stale, left by
    other code); ``stored_at`` is when the schedule was last written (unix seconds);
    ``malformed`` says why its expression or time zone cannot be read (it was not written by
    jsworker), None when they can.
    """

    name: str
    task: str
    queue: str
    expression: str
    tz: str | None
    paused: bool
    digest: str
    seq: int
    stored_at: float | None
    declared: bool
    body: bytes = field(default=b"", repr=False)
    content_type: str = field(default="", repr=False)
    #: How its ticks expire (:func:`~.declare.tick_expiry`).
    expires: str = NEXT_TICK
    #: The job id its ticks' subject ends in (a unique task's), None for none.
    job_id: str | None = None
    #: The caller's own headers its ticks carry.
    headers: Mapping[str, str] = field(default_factory=dict)
    malformed: str | None = None

    def next_run(self, now: float | None = None) -> datetime | None:
        """When the schedule fires next (UTC), None when paused or malformed. Exact for cron;
        for ``@every`` counted from when it was written, as the server counts (an outage moves it)."""
        if self.paused or self.malformed is not None:
            return None
        now = time.time() if now is None else now
        if self.expression.startswith("@every "):
            period = duration_seconds(self.expression[7:])
            first = round(self.stored_at or now) + period
            ticks = max(0, math.ceil((now - first) / period))
            return datetime.fromtimestamp(first + ticks * period, UTC)
        return Cron.parse(self.expression).next_after(datetime.fromtimestamp(now, UTC), zone(self.tz))


#: The largest header block the server stores, in bytes: past it a write is refused with
#: "header size exceeds maximum allowed of 64k" (JetStream error 10097).
MAX_HEADER_BLOCK = 65_535


def written_header_block(msg: OutMessage, expect_last: int | None = None) -> int:
    """Bytes of the header block the server holds against :data:`MAX_HEADER_BLOCK` when
    ``msg`` is written expecting last sequence ``expect_last`` (None: the longest one, 20
    digits). Counted as the server counts: ``msg``'s own block, the
    ``Nats-Expected-Last-Subject-Sequence`` every write adds, and the ``Nats-Rollup: sub``
    the server adds to a schedule that has none, before it checks the size."""
    digits = 20 if expect_last is None else len(str(expect_last))
    size = msg.size - len(msg.body) + len(EXPECTED_LAST_SUBJECT_SEQ) + len(": \r\n") + digits
    if SCHEDULE in msg.headers and ROLLUP not in msg.headers:
        size += len(ROLLUP) + len(": sub\r\n")
    return size


def check_schedule_size(app: SchedulingApp, schedule: Schedule) -> None:
    """ConfigurationError naming ``schedule`` when the server would refuse its message for
    the size of its headers (a very long cron expression: it travels twice, as the schedule
    and as its declaration). The body is checked at install, against the server's
    ``max_payload``, which only a connection knows."""
    # With the longest sequence a later update may expect: what is declared now stays
    # installable (at most 19 bytes stricter than the first write).
    size = written_header_block(_message(app, _declared_state(app, schedule), paused=False))
    if size > MAX_HEADER_BLOCK:
        raise ConfigurationError(
            f"schedule {schedule.name!r}: its headers come to {size} bytes, and the server refuses "
            f"more than {MAX_HEADER_BLOCK} (shorten the cron expression)"
        )


def _message(app: SchedulingApp, state: ScheduleState, paused: bool) -> OutMessage:
    ns = app.namespace
    headers = {
        **state.headers,
        TASK: state.task,
        QUEUE: state.queue,
        SCHEDULE_NAME: state.name,
        SCHEDULE_SPEC: state.expression,
        SCHEDULE_DIGEST: state.digest,
        CONTENT_TYPE: state.content_type,
    }
    if state.tz:
        headers[SCHEDULE_ZONE] = state.tz
    if state.expires != NEXT_TICK:
        headers[TICK_EXPIRES] = state.expires
    if paused:
        headers[PAUSED] = "1"
        headers[ROLLUP] = "sub"
    else:
        headers[SCHEDULE] = state.expression
        headers[SCHEDULE_TARGET] = ns.fired_subject(ns.job_subject(state.queue, state.task, state.job_id))
        if state.tz:
            headers[SCHEDULE_TIME_ZONE] = state.tz
    return OutMessage(ns.periodic_subject(state.name), state.body, headers)


def _declared_state(app: SchedulingApp, schedule: Schedule) -> ScheduleState:
    return ScheduleState(
        name=schedule.name,
        task=schedule.task,
        queue=schedule.queue,
        expression=schedule.expression,
        tz=schedule.tz,
        paused=False,
        digest=schedule.digest,
        seq=0,
        stored_at=None,
        declared=True,
        body=schedule.body,
        content_type=app.serializer.content_type,
        expires=schedule.expires,
        job_id=schedule.job_id,
        headers=schedule.headers,
    )


def _stored_state(app: SchedulingApp, msg: StoredMessage) -> ScheduleState | None:
    h = msg.headers
    name = app.namespace.parse_periodic_subject(msg.subject)
    if name is None or TASK not in h or QUEUE not in h or SCHEDULE_SPEC not in h:
        return None  # not written by jsworker
    return ScheduleState(
        name=name,
        task=h[TASK],
        queue=h[QUEUE],
        expression=h[SCHEDULE_SPEC],
        tz=h.get(SCHEDULE_ZONE),
        paused=PAUSED in h,
        digest=h.get(SCHEDULE_DIGEST, ""),
        seq=msg.seq,
        stored_at=msg.stored_at,
        declared=name in app.schedules,
        body=msg.body or b"",
        content_type=h.get(CONTENT_TYPE, ""),
        expires=h.get(TICK_EXPIRES, NEXT_TICK),
        job_id=_target_id(h.get(SCHEDULE_TARGET, "")),
        headers=caller_headers(h),
        malformed=_unreadable(h[SCHEDULE_SPEC], h.get(SCHEDULE_ZONE)),
    )


def _unreadable(expression: str, tz: str | None) -> str | None:
    """Why ``expression`` in time zone ``tz`` is no schedule jsworker writes, None when it is
    one: a message planted by hand is listed as malformed, never read as a cadence."""
    try:
        if expression.startswith("@every "):
            if not duration_seconds(expression[7:]) > 0:
                raise ValueError("a period must be positive")
        else:
            Cron.parse(expression)
        zone(tz)
    except (ValueError, ConfigurationError) as exc:
        return f"cannot read {expression!r:.80} (zone {tz!r:.40}): {exc}"[:300]
    return None


def _target_id(target: str) -> str | None:
    """The job id a schedule's target subject ends in, None when it has none."""
    parts = target.split(".")
    return parts[5] if len(parts) == 6 else None


async def read_schedules(app: SchedulingApp, conn: Connection) -> dict[str, ScheduleState]:
    """Every periodic schedule of the app on the server, by name."""
    ns = app.namespace
    facts = await stream_facts(conn, ns.schedules_stream, ns.periodic_filter)
    found: dict[str, ScheduleState] = {}
    stream = LimitsStream(conn, ns.schedules_stream)
    for subject in sorted(facts.subjects or {}):
        msg = await stream.last(subject)
        state = _stored_state(app, msg) if msg is not None else None
        if state is not None:
            found[state.name] = state
    return found


async def read_schedule(app: SchedulingApp, conn: Connection, name: str) -> ScheduleState | None:
    """Periodic schedule ``name`` as the server holds it; None when there is none."""
    subject = app.namespace.periodic_subject(validate_name("schedule", name))
    msg = await LimitsStream(conn, app.namespace.schedules_stream).last(subject)
    return _stored_state(app, msg) if msg is not None else None


async def _install(
    app: SchedulingApp,
    conn: Connection,
    wanted: ScheduleState,
    current: ScheduleState | None,
    *,
    off: bool = False,
) -> str:
    """Bring one schedule to ``wanted`` (keeping its paused state; paused when ``off``: code
    switched it off); ``created``, ``updated`` or ``unchanged``. :class:`ScheduleRefused`
    when the server refuses it or it cannot be sent; a failure that may pass (no answer, no
    leader) raises :class:`WriteRefused`."""
    for _ in range(_ROUNDS):
        if current is not None and current.digest == wanted.digest:
            return "unchanged"
        # Paused stays paused: a worker of code older than the code that switched the schedule
        # off (its digest differs, so it writes) never switches it back on.
        paused = off or (current is not None and current.paused)
        msg = _message(app, wanted, paused)
        expect_last = current.seq if current else 0
        if (size := written_header_block(msg, expect_last)) > MAX_HEADER_BLOCK:
            # Declaring checks this already; a Schedule made by hand may still get here.
            raise ScheduleRefused(
                f"its headers come to {size} bytes, and the server refuses more than {MAX_HEADER_BLOCK}"
            )
        try:
            # An oversized message would get the connection closed by the server: never sent.
            check_size(msg, conn.max_payload)
            await write_message(conn, msg, expect_last)
            return "updated" if current is not None else "created"
        except SubjectMoved:
            current = await read_schedule(app, conn, wanted.name)
        except PayloadTooLargeError as exc:
            raise ScheduleRefused(str(exc)) from exc
        except WriteRefused as exc:
            if exc.transient:
                raise
            raise ScheduleRefused(str(exc)) from exc
    raise ScheduleRefused("it keeps changing under this process")


async def write_message(conn: Connection, msg: OutMessage, expect_last: int) -> None:
    """Store ``msg`` in place of the message with sequence ``expect_last`` on its subject."""
    await write(conn, msg.subject, msg.body, msg.headers, expect_last=expect_last)


async def sync_schedules(app: SchedulingApp, conn: Connection, *, prune: bool = False) -> SyncReport:
    """Install the app's declared schedules: create missing ones, replace changed ones, leave
    identical ones untouched (their timing goes on undisturbed). Schedules on the server that
    the app does not declare are reported as stale, and removed only with ``prune``.

    Each schedule is installed on its own: one the server refuses is skipped and the others
    are still installed; then :class:`SchedulesRefused` (carrying the report) names the
    refused ones and why. A failure that may pass (no answer, no leader) stops the sync."""
    report = SyncReport()
    current = await read_schedules(app, conn)
    for name, schedule in app.schedules.items():
        try:
            # A Schedule built by hand skipped the declaration's checks: its expression may
            # not even parse.
            wanted = _declared_state(app, schedule)
            done = await _install(app, conn, wanted, current.get(name), off=not schedule.enabled)
        except ConfigurationError as exc:  # ScheduleRefused, or an expression that does not parse
            report.refused[name] = str(exc)
            continue
        getattr(report, done).append(name)
    for name, state in current.items():
        if name in app.schedules:
            continue
        report.stale.append(name)
        if prune and await LimitsStream(conn, app.namespace.schedules_stream).delete(state.seq):
            report.removed.append(name)
    if report.refused:
        raise SchedulesRefused(report)
    return report


async def restore_missing(app: SchedulingApp, conn: Connection) -> list[str]:
    """Create the declared schedules the server does not hold (removed since they were
    installed: by a purge, a rollup, an operator), leaving every other schedule as it is: the
    workers of two versions running side by side must not rewrite each other's. The names of
    those this process created (another process may have put one back first)."""
    current = await read_schedules(app, conn)
    restored = []
    for name, schedule in app.schedules.items():
        if name in current:
            continue
        try:
            done = await _install(app, conn, _declared_state(app, schedule), None, off=not schedule.enabled)
        except ConfigurationError:
            continue  # refused when the worker started, and logged then
        if done == "created":
            restored.append(name)
    return restored


async def put_schedule(app: SchedulingApp, conn: Connection, schedule: Schedule) -> str:
    """Install ``schedule``, one the code does not declare (made at run time, see
    :func:`~.declare.schedule_of`): ``created``, ``updated`` or ``unchanged``, its paused
    state kept. Workers keep it as they keep every schedule they do not declare (stale,
    removed only on request)."""
    check_schedule_size(app, schedule)
    current = await read_schedule(app, conn, schedule.name)
    return await _install(app, conn, _declared_state(app, schedule), current)


async def set_paused(app: SchedulingApp, conn: Connection, name: str, paused: bool) -> bool:
    """Pause or resume schedule ``name``; True when that changed something, False when it
    already was so. :class:`ScheduleNotFound` when there is no such schedule."""
    for _ in range(_ROUNDS):
        state = await read_schedule(app, conn, name)
        if state is None:
            raise ScheduleNotFound(f"no schedule named {name!r} on the server (app {app.name})")
        if state.paused == paused:
            return False
        try:
            await write_message(conn, _message(app, state, paused), state.seq)
            return True
        except SubjectMoved:
            continue
    raise ConfigurationError(f"schedule {name!r} keeps changing under this process")


async def remove_schedule(app: SchedulingApp, conn: Connection, name: str) -> bool:
    """Remove schedule ``name`` from the server; False when there was none. A worker starting
    with code that declares it installs it again."""
    state = await read_schedule(app, conn, name)
    return state is not None and await LimitsStream(conn, app.namespace.schedules_stream).delete(state.seq)
