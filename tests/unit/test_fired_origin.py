"""Which fired jobs a worker accepts as fired by a schedule of its app (no server: the
real-server attacks are in tests/integration/test_attacks.py)."""

from __future__ import annotations

import time

import pytest

from jsworker import App
from jsworker._runtime.execution import as_job_run
from jsworker._runtime.interceptors.fired import FiredJobs
from jsworker._wire.headers import (
    FIRED_BY,
    FIRED_NEXT,
    JOB_ID,
    SCHEDULE_NAME,
    SCHEDULE_SPEC,
    SCHEDULED_FOR,
    TASK,
)
from jsworker.jetstream.delivery import Delivery

APP = App("origin")
PAST = int(time.time() * 1000) - 60_000


class _NoVerbs:
    async def publish(self, subject: str, data: bytes) -> None:
        raise AssertionError("checking a job sends nothing")

    def put(self, subject: str, data: bytes) -> None:
        raise AssertionError("checking a job sends nothing")


def _why(headers: dict[str, str]) -> str | None:
    delivery = Delivery(
        _NoVerbs(), "jsw.origin.q.default.t", "$JS.ACK.S.C.1.9.9.0.0", b"", {TASK: "t", **headers}
    )
    job = as_job_run(APP, "default", delivery)
    return FiredJobs(APP, conn=None)._foreign(job)  # type: ignore[arg-type]  # never used here


def _delayed(job_id: str = "j1", due: int = PAST, more: dict[str, str] | None = None) -> dict[str, str]:
    return {
        FIRED_BY: f"jsw.origin.sched.at.default.{due}.{job_id}",
        FIRED_NEXT: "purge",
        JOB_ID: job_id,
        SCHEDULED_FOR: str(due),
        **(more or {}),
    }


def test_a_one_shot_firing_that_names_its_own_schedule_is_accepted() -> None:
    assert _why(_delayed()) is None


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        (_delayed(more={FIRED_NEXT: "2030-01-01T00:00:00Z"}), "fires more than once"),
        (_delayed(more={JOB_ID: "someone-else"}), "another job than the one it names"),
        (_delayed(more={SCHEDULED_FOR: str(PAST - 1)}), "another job than the one it names"),
        (_delayed(due=PAST + 7_200_000), "before it was due"),
        ({FIRED_BY: "jsw.origin.q.default.t.x", FIRED_NEXT: "purge"}, "no schedule of this app's"),
        ({FIRED_BY: "jsw.origin.sched.at.default.1.x", FIRED_NEXT: "purge"}, "another job"),
    ],
)
def test_other_firings_are_refused_with_the_reason(headers: dict[str, str], reason: str) -> None:
    why = _why(headers)
    assert why is not None and reason in why, why


def test_a_tick_must_come_from_the_periodic_schedule_it_names() -> None:
    tick = {SCHEDULE_NAME: "beat", SCHEDULE_SPEC: "@every 1s", FIRED_NEXT: "2020-01-01T00:00:02Z"}
    assert _why({**tick, FIRED_BY: "jsw.origin.sched.repeat.beat"}) is None
    assert "no schedule of this app's" in (_why({**tick, FIRED_BY: "jsw.origin.sched.repeat.other"}) or "")
