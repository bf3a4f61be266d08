"""Snooze on a real server: a job put back by its task runs again later without spending an
attempt, its status counts the snoozes, and the metric does too."""

from __future__ import annotations

from collections import Counter

import pytest

from jsworker import App, JobState, Snooze, current_job
from jsworker.testing import NatsServer

from .workers import in_process_worker

pytestmark = pytest.mark.anyio


async def test_three_snoozes_with_no_retries_left_then_success(nats_server: NatsServer) -> None:
    ran: Counter[str] = Counter()
    app = App("snz", nats_server.url, max_retries=0, max_crashes=0)

    @app.task(store_result=True)
    async def patient(key: str) -> str:
        ran[key] += 1
        if ran[key] <= 3:
            raise Snooze(0.05, f"not ready ({ran[key]})")
        return f"ready after {current_job().attempt} deliveries"

    @app.task
    async def sleepy() -> None:
        raise Snooze(3600, "tomorrow")

    async with in_process_worker(app):
        job = await patient.adelay("a")
        assert await job.aresult(timeout=30) == "ready after 4 deliveries"
        waiting = await sleepy.adelay()

        async def snoozed() -> bool:
            return (await waiting.astatus()).state is JobState.SNOOZED

        from ..support import wait_until_async

        await wait_until_async(snoozed, timeout=10, message="the sleepy job to show as snoozed")
        status = await waiting.astatus()
    assert ran["a"] == 4  # snoozed three times, not dead-lettered with max_retries=0, max_crashes=0
    assert status.snoozes == 1 and status.reason == "tomorrow" and status.next_attempt_at is not None
    snoozes = app.metrics.registry.get_sample_value(
        "jsworker_jobs_snoozed_total", {"queue": "default", "task": "patient"}
    )
    assert snoozes == 3


def test_a_snooze_delay_is_checked() -> None:
    with pytest.raises(ValueError, match="Snooze delay"):
        Snooze(-1)
    with pytest.raises(ValueError, match="Snooze delay"):
        Snooze(10**9)
