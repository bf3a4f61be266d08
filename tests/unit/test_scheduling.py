"""Schedule expressions, due times and the identity of fired jobs: checked without a server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from jsworker import App, ConfigurationError
from jsworker._enqueue.calls import due_time
from jsworker._runtime.execution import JobRun, as_job_run
from jsworker._scheduling.cron import Cron, as_written, duration_seconds, every_seconds, go_duration
from jsworker._scheduling.declare import at_expression
from jsworker._scheduling.firing import firing, tick_job_id
from jsworker._wire.headers import (
    FIRED_BY,
    FIRED_NEXT,
    JOB_ID,
    SCHEDULE_NAME,
    SCHEDULE_SPEC,
    SCHEDULE_ZONE,
    SCHEDULED_FOR,
    TASK,
)
from jsworker.jetstream.delivery import Delivery


def _utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


def test_five_fields_gain_a_zero_seconds_field_and_names_are_read() -> None:
    assert Cron.parse("0 7 * * *").expression == "0 0 7 * * *"
    assert Cron.parse("*/15 9-17 * * mon-fri").weekdays == frozenset({1, 2, 3, 4, 5})
    assert Cron.parse("0 0 1 jan,jul *").months == frozenset({1, 7})
    assert Cron.parse("@hourly").expression == "0 0 * * * *"
    assert Cron.parse("30 */10 * * * *").seconds == frozenset({30})
    assert Cron.parse("5/20 * * * *").minutes == frozenset({5, 25, 45})


@pytest.mark.parametrize(
    "text",
    ["", "* * * *", "* * * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *", "* * * * 7",
     "*/0 * * * *", "5-1 * * * *", "a * * * *", "1-2-3 * * * *", "1/2/3 * * * *", "@every 5s"],
)  # fmt: skip
def test_expressions_the_server_would_refuse_are_refused_here(text: str) -> None:
    with pytest.raises(ConfigurationError, match="invalid cron"):
        Cron.parse(text)


def test_next_and_previous_fire_times_in_utc_and_in_a_zone() -> None:
    daily = Cron.parse("0 7 * * *")
    assert daily.next_after(_utc(2026, 3, 1, 7, 0, 0)) == _utc(2026, 3, 2, 7, 0, 0)
    assert daily.next_after(_utc(2026, 3, 1, 6, 59, 59)) == _utc(2026, 3, 1, 7, 0, 0)
    assert daily.previous_before(_utc(2026, 3, 2, 7, 0, 0)) == _utc(2026, 3, 1, 7, 0, 0)
    berlin = ZoneInfo("Europe/Berlin")
    # 07:00 in Berlin is 06:00 UTC in winter and 05:00 UTC in summer.
    assert daily.next_after(_utc(2026, 1, 10, 12), berlin) == _utc(2026, 1, 11, 6)
    assert daily.next_after(_utc(2026, 7, 10, 12), berlin) == _utc(2026, 7, 11, 5)
    assert daily.previous_before(_utc(2026, 7, 11, 5), berlin) == _utc(2026, 7, 10, 5)
    # Day of month and day of week both restricted: either matches (the 13th, or any Friday).
    either = Cron.parse("0 0 13 * fri")
    assert either.next_after(_utc(2026, 11, 1)) == _utc(2026, 11, 6)
    assert either.next_after(_utc(2026, 11, 6)) == _utc(2026, 11, 13)
    every_second = Cron.parse("* * * * * *")
    assert every_second.previous_before(_utc(2026, 1, 1, 0, 0, 0, 500_000)) == _utc(2026, 1, 1)
    assert Cron.parse("0 0 30 2 *").next_after(_utc(2026, 1, 1)) is None  # February 30th never comes


def test_intervals_durations_and_zones() -> None:
    assert every_seconds(timedelta(minutes=2)) == 120.0
    assert go_duration(90) == "90s" and go_duration(1.5) == "1s500ms"
    assert duration_seconds("1s500ms") == 1.5 and duration_seconds("90s") == 90.0
    for bad in (0.5, timedelta(milliseconds=999), -1, float("nan"), True, "5"):
        with pytest.raises(ConfigurationError, match="at least 1 second"):
            every_seconds(bad)  # type: ignore[arg-type]


def test_due_times() -> None:
    assert due_time(None, None) is None
    assert due_time(0, None) is None
    soon = due_time(2.5, None)
    assert soon is not None and soon.tzinfo is UTC
    assert 2.0 < (soon - datetime.now(UTC)).total_seconds() <= 2.501  # rounded up to the millisecond
    eta = datetime.now(timezone(timedelta(hours=2))).replace(microsecond=250_000) + timedelta(minutes=1)
    assert due_time(None, eta) == eta.astimezone(UTC)
    assert due_time(None, eta + timedelta(microseconds=1)) == eta.astimezone(UTC) + timedelta(milliseconds=1)
    assert due_time(None, datetime.now(UTC) - timedelta(seconds=1)) is None  # past: runs now
    with pytest.raises(ConfigurationError, match="no time zone"):
        due_time(None, datetime.now() + timedelta(minutes=1))
    for bad in (-1, float("inf"), "5", True):
        with pytest.raises(ConfigurationError, match="countdown"):
            due_time(bad, None)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="not both"):
        due_time(1, eta)
    assert at_expression(_utc(2026, 1, 2, 3, 4, 5, 600_000)) == "@at 2026-01-02T03:04:05.600000Z"


def test_declaring_schedules_checks_everything_and_names_the_schedule() -> None:
    app = App("decl")

    @app.task(cron="0 7 * * *", tz="Europe/Berlin")
    def report() -> None: ...

    @app.task
    def ping(host: str) -> None: ...

    assert app.schedules["report"].expression == "0 0 7 * * *"
    every = app.schedule(ping, every=timedelta(seconds=30), name="ping-db", args=("db",))
    assert every.expression == "@every 30s" and every.args == ("db",)
    cases = [
        ({"cron": "61 * * * *", "name": "a"}, "schedule 'a': invalid cron"),
        ({"cron": "* * * * *", "tz": "Mars/Base", "name": "b"}, "schedule 'b': unknown time zone"),
        ({"every": 0.5, "name": "c"}, "schedule 'c': every must be at least 1 second"),
        ({"every": 5, "tz": "UTC", "name": "d"}, "schedule 'd': tz applies to cron"),
        ({"every": 5, "cron": "* * * * *", "name": "e"}, "exactly one"),
        ({"name": "f"}, "exactly one"),
        ({"every": 5, "name": "ping-db"}, "already has a schedule named 'ping-db'"),
        ({"every": 5, "name": "bad.name"}, "invalid schedule name"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ConfigurationError, match=message):
            app.schedule(ping, args=("x",), **kwargs)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ping"):
        app.schedule(ping, every=5, name="g")  # missing its argument
    with pytest.raises(ConfigurationError, match="tz is for cron"):
        app.task(name="zoned", tz="UTC")(lambda: None)
    assert set(app.schedules) == {"report", "ping-db"}


def test_fired_jobs_are_identified_the_same_for_every_copy() -> None:
    delayed = firing({JOB_ID: "order-1", SCHEDULED_FOR: "1767225600123"})
    assert delayed == ("order-1", 1767225600123, "delayed")
    tick = {SCHEDULE_NAME: "nightly", SCHEDULE_SPEC: "0 0 7 * * *", FIRED_NEXT: "2026-01-02T07:00:00Z"}
    assert firing(tick) == ("nightly-20260101T070000Z", 1767250800000, "periodic")
    zoned = {**tick, SCHEDULE_ZONE: "Europe/Berlin", FIRED_NEXT: "2026-01-02T07:00:00+01:00"}
    assert firing(zoned) == ("nightly-20260101T060000Z", 1767247200000, "periodic")
    every = {SCHEDULE_NAME: "beat", SCHEDULE_SPEC: "@every 1s500ms", FIRED_NEXT: "2026-01-01T00:00:03Z"}
    assert firing(every) == ("beat-20260101T000001500Z", 1767225601500, "periodic")
    assert firing({SCHEDULE_NAME: "x", SCHEDULE_SPEC: "nonsense", FIRED_NEXT: "2026-01-01T00:00:00Z"}) is None
    assert firing({}) is None
    assert tick_job_id("n", 1767225600000) == "n-20260101T000000Z"


def test_a_catch_up_tick_is_dated_no_later_than_the_server_stored_it() -> None:
    """The server dates a catch-up tick from the nearest whole second, here 0.3 s after it
    stored the tick: the job keeps that id but its due time is when it was stored."""
    app = App("dating")
    headers = {
        FIRED_BY: "jsw.dating.sched.every.beat",
        SCHEDULE_NAME: "beat",
        SCHEDULE_SPEC: "@every 1s",
        FIRED_NEXT: "2026-01-01T00:00:02Z",
        TASK: "t",
    }

    def run(stored_ns: int) -> JobRun:
        reply = f"$JS.ACK.S.C.1.5.5.{stored_ns}.0"
        return as_job_run(app, "default", Delivery(_NoVerbs(), "jsw.dating.q.default.t", reply, b"", headers))

    caught_up = run(1767225600_700_000_000)
    assert caught_up.job_id == "beat-20260101T000001Z"
    assert caught_up.due_at == pytest.approx(1767225600.7)
    on_time = run(1767225601_000_300_000)
    assert on_time.job_id == caught_up.job_id
    assert on_time.due_at == 1767225601.0
    plain = as_job_run(app, "default", Delivery(_NoVerbs(), "jsw.dating.q.default.t", "", b"", {TASK: "t"}))
    assert plain.due_at is None


class _NoVerbs:
    async def publish(self, subject: str, data: bytes) -> None:
        raise AssertionError("identifying a job sends nothing")

    def put(self, subject: str, data: bytes) -> None:
        raise AssertionError("identifying a job sends nothing")


@pytest.mark.parametrize(
    ("fired", "written"),
    [
        ("0 0 2 * * *", "0 2 * * *"),  # a five-field declaration, as the server holds it
        ("30 0 2 * * *", "30 0 2 * * *"),  # seconds of its own: six fields are the only way
        ("@every 300s", "@every 300s"),
    ],
)
def test_schedules_are_shown_as_written(fired: str, written: str) -> None:
    assert as_written(fired) == written
    if not fired.startswith("@every"):
        assert Cron.parse(written).expression == fired  # and back to what the server fires
