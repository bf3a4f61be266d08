"""Bounds the server holds schedules and delayed jobs to, checked when they are declared or
called: intervals, cron expressions that never fire, header sizes, zones meaning the server
host's local time, and ``countdown``/``eta``/``expires`` past the end of year 9999."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from jsworker import App, ConfigurationError
from jsworker._config import LATEST_MS, LATEST_TEXT, check_ahead
from jsworker._enqueue.calls import due_time
from jsworker._enqueue.task import Task
from jsworker._scheduling.cron import MAX_EVERY, Cron, check_zone, every_seconds
from jsworker._scheduling.declare import at_expression
from jsworker._scheduling.periodic import MAX_HEADER_BLOCK

UNREACHABLE = "nats://127.0.0.1:1"
LAST = datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC)


def _app() -> tuple[App, Task[[], None]]:
    app = App("limits", UNREACHABLE)

    @app.task
    def tick() -> None: ...

    return app, tick


# -- intervals -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "every", [1e12, MAX_EVERY + 0.001, timedelta(days=365 * 300), pytest.param(10**400, id="10**400")]
)
def test_an_interval_longer_than_a_go_duration_is_refused_with_its_range(every: Any) -> None:
    app, tick = _app()
    with pytest.raises(
        ConfigurationError, match=r"schedule 'tick': every must be at least 1 second and at most "
    ):
        app.schedule(tick, every=every)
    assert not app.schedules


def test_the_longest_interval_and_one_that_is_sent_as_one_second_are_accepted() -> None:
    app, tick = _app()
    assert app.schedule(tick, every=MAX_EVERY, name="longest").expression == "@every 9223372036s854ms"
    assert app.schedule(tick, every=timedelta(days=365 * 290), name="years").every == 365 * 290 * 86400
    # 0.9996 s is written for the server as "1s", which it takes.
    assert app.schedule(tick, every=0.9996, name="rounded").expression == "@every 1s"
    with pytest.raises(ConfigurationError, match="at least 1 second"):
        every_seconds(0.9994)


# -- cron that never fires -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "tz"),
    [
        ("59 23 31 2 *", None),
        ("0 0 30 2 *", "Europe/Berlin"),
        ("0 0 31 4,6,9,11 *", None),
        ("0 0 0 31 2 *", None),
    ],
)
def test_a_cron_that_can_never_fire_is_refused_at_declaration(cron: str, tz: str | None) -> None:
    app, tick = _app()
    with pytest.raises(
        ConfigurationError, match=r"schedule 'tick': cron .* never fires: no time in the next five"
    ):
        app.schedule(tick, cron=cron, tz=tz)
    assert not app.schedules


def test_rare_crons_that_do_fire_are_accepted() -> None:
    app, tick = _app()
    app.schedule(tick, cron="0 0 29 2 *", name="leap-day")  # a leap day comes within five years
    app.schedule(tick, cron="0 0 31 2 mon", name="either-day")  # day of month or weekday: Mondays
    app.schedule(tick, cron="0 0 31 12 *", tz="Pacific/Kiritimati", name="new-years-eve")
    assert set(app.schedules) == {"leap-day", "either-day", "new-years-eve"}


@pytest.mark.parametrize(
    "text",
    [
        "\u0663 * * * *",
        "\u00b2 * * * *",
        "*/1_0 * * * *",
        "*/ * * * *",
        "1" * 5000 + " * * * *",
        "5/x * * * *",
    ],
)
def test_numbers_the_server_cannot_read_are_refused_as_invalid_cron(text: str) -> None:
    # Arabic-Indic three and superscript two pass str.isdigit; the server's Atoi reads neither.
    with pytest.raises(ConfigurationError, match="invalid cron") as caught:
        Cron.parse(text)
    assert len(str(caught.value)) < 400  # the expression is quoted, not copied whole


# -- header sizes --------------------------------------------------------------------------


def test_a_cron_too_long_for_the_server_s_header_limit_is_refused_at_declaration() -> None:
    app, tick = _app()
    huge = "0 0 1 1 " + ",".join(["*"] * 25_000)  # 50 KB, and valid: it travels twice in the headers
    assert len(huge) > 50_000
    with pytest.raises(
        ConfigurationError, match=rf"schedule 'tick': its headers come to \d+ bytes.*{MAX_HEADER_BLOCK}"
    ) as caught:
        app.schedule(tick, cron=huge)
    assert len(str(caught.value)) < 400
    assert not app.schedules
    fits = "0 0 1 1 " + ",".join(["*"] * 12_000)  # 24 KB: 48 KB of headers, which the server stores
    assert app.schedule(tick, cron=fits, name="long").expression.startswith("0 0 0 1 1 *,*")


# -- zones ---------------------------------------------------------------------------------


@pytest.mark.parametrize("tz", ["localtime", "Local", "LOCAL", "posix/localtime"])
def test_a_zone_meaning_the_server_host_s_local_time_is_refused(tz: str) -> None:
    app, tick = _app()
    with pytest.raises(ConfigurationError, match="local time of the server's host") as caught:
        app.schedule(tick, cron="0 7 * * *", tz=tz)
    assert "Europe/Berlin" in str(caught.value)  # and what to use instead
    assert not app.schedules


@pytest.mark.parametrize("tz", ["Europe/../UTC", "\\UTC", "", "./UTC"])
def test_zone_names_the_server_refuses_to_load_are_refused(tz: str) -> None:
    with pytest.raises(ConfigurationError, match="unknown time zone"):
        check_zone(tz)


# -- countdown, eta, expires ---------------------------------------------------------------


@pytest.mark.parametrize(
    "countdown", [3e11, 1e20, 1.7e308, pytest.param(10**400, id="10**400"), -1, float("inf")]
)
def test_a_countdown_out_of_range_names_the_argument_and_the_range(countdown: Any) -> None:
    with pytest.raises(ConfigurationError) as caught:
        due_time(countdown, None)
    message = str(caught.value)
    assert message.startswith("countdown must be a number of seconds >= 0 and at most ")
    assert LATEST_TEXT in message and len(message) < 400


def test_the_longest_countdown_is_due_at_the_end_of_year_9999() -> None:
    now = time.time()
    longest = LATEST_MS / 1000 - now - 5  # a few seconds to spare for the time this takes
    due = due_time(longest, None)
    assert due is not None and due.year == 9999
    assert at_expression(due).startswith("@at 9999-12-31T23:59:5")
    with pytest.raises(ConfigurationError, match="countdown"):
        check_ahead("countdown", LATEST_MS / 1000 - now + 0.0005, positive=False, now=now)


def test_an_eta_on_the_last_millisecond_of_9999_is_kept_and_one_later_is_refused() -> None:
    assert due_time(None, LAST) == LAST
    assert at_expression(LAST) == "@at 9999-12-31T23:59:59.999000Z"
    app, tick = _app()
    msg = app.producer.message(tick, tick.make_call((), None, None, due_time(None, LAST)))
    parsed = app.namespace.parse_later_subject(msg.subject)
    assert parsed is not None and parsed[1] == LATEST_MS
    for late in (
        LAST + timedelta(microseconds=1),  # rounded up to the millisecond: into year 10000
        datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(9999, 12, 31, 20, tzinfo=timezone(timedelta(hours=-5))),  # 10000-01-01 in UTC
    ):
        with pytest.raises(ConfigurationError, match=rf"eta must be no later than {LATEST_TEXT}"):
            due_time(None, late)


@pytest.mark.parametrize("expires", [3e11, 1e20, pytest.param(10**400, id="10**400")])
def test_expires_out_of_range_is_refused_on_the_task_and_on_the_call(expires: Any) -> None:
    app, tick = _app()
    message = r"expires must be a number of seconds > 0 and at most \d+ \(it must end by 9999"
    with pytest.raises(ConfigurationError, match=message):
        app.task(name="later", expires=expires)(lambda: None)
    with pytest.raises(ConfigurationError, match=message):
        tick.make_call((), None, None, expires=expires)
    with pytest.raises(ConfigurationError, match=message):
        tick.apply(expires=expires)  # refused before anything is sent


def test_the_longest_expires_ends_by_the_end_of_year_9999() -> None:
    app, tick = _app()
    longest = LATEST_MS / 1000 - time.time() - 5
    call = tick.make_call((), None, None, expires=longest)
    assert call.expires_at is not None and LATEST_MS - 10_000 < call.expires_at <= LATEST_MS
    assert app.task(name="later", expires=longest)(lambda: None).options.expires == longest
