"""How periodic ticks expire: declared on the schedule, taken from the task, or by default
once the next tick is due."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jsworker import App, ConfigurationError
from jsworker._scheduling.declare import NEVER, NEXT_TICK, tick_expiry, tick_limit


def test_a_schedule_s_expiry_is_its_own_else_its_task_s_else_the_next_tick() -> None:
    assert tick_expiry("s", None, None) == NEXT_TICK
    assert tick_expiry("s", None, 30.0) == "30.0"
    assert tick_expiry("s", timedelta(minutes=2), 30.0) == "120.0"
    assert tick_expiry("s", "never", 30.0) == NEVER
    for bad in ("soon", 0, -1, float("nan")):
        with pytest.raises(ConfigurationError, match="schedule 's'"):
            tick_expiry("s", bad, None)


def test_the_limit_of_a_tick() -> None:
    due_ms = 1_767_225_600_000
    following = datetime.fromtimestamp(due_ms / 1000 + 60, UTC)
    assert tick_limit(None, due_ms, following) == due_ms / 1000 + 60  # installed before expiry existed
    assert tick_limit(NEXT_TICK, due_ms, following) == due_ms / 1000 + 60
    assert tick_limit("5.0", due_ms, following) == due_ms / 1000 + 5
    assert tick_limit(NEVER, due_ms, following) is None


def test_app_schedule_takes_expires_and_a_changed_expiry_changes_the_digest() -> None:
    app = App("ticks")

    @app.task(expires=10)
    async def beat() -> None: ...

    default = app.schedule(beat, every=60, name="a")
    never = app.schedule(beat, every=60, name="b", expires="never")
    assert default.expires == "10.0" and never.expires == NEVER
    assert default.digest != never.digest  # a changed expiry is installed again
    plain = App("ticks2")

    @plain.task
    async def other() -> None: ...

    assert plain.schedule(other, every=60).expires == NEXT_TICK
