"""Delayed jobs against a real nats-server: they wait on the server, start no earlier than
due, keep their job id, deduplicate, and can be cancelled until they fire."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from jsworker import App, ConfigurationError, current_job
from jsworker._scheduling.claims import CANCELLED, claim
from jsworker._scheduling.delayed import due_ms
from jsworker.testing import NatsServer

from ..support import connected, consumer_state_async, made_schedule, stream_messages_async, wait_until_async
from .workers import in_process_worker

pytestmark = pytest.mark.anyio


def _app(url: str, runs: list[dict[str, Any]], **options: Any) -> App:
    app = App("later", url, **options)

    @app.task
    async def remind(n: int) -> None:
        job = current_job()
        runs.append({"n": n, "id": job.id, "at": time.time(), "due": job.scheduled_for})

    return app


async def test_delayed_jobs_wait_on_the_server_and_start_no_earlier_than_due(nats_server: NatsServer) -> None:
    runs: list[dict[str, Any]] = []
    app = _app(nats_server.url, runs)
    remind = app.tasks["remind"]
    async with in_process_worker(app):
        eta = datetime.now(UTC) + timedelta(seconds=1.2)
        jobs = [
            await remind.aapply((1,), countdown=0.6),
            await remind.aapply((2,), eta=eta.astimezone(timezone(timedelta(hours=-5)))),
            await remind.aapply((3,), countdown=1.0, job_id="mine-3"),
        ]
        assert all(j.scheduled_for is not None for j in jobs)
        assert jobs[1].scheduled_for == datetime.fromtimestamp(due_ms(eta) / 1000, UTC)
        # Nothing is in a queue yet: the jobs wait on the server as schedules.
        assert (await consumer_state_async(nats_server.url, "JSW_LATER", "default")).pending == 0
        await wait_until_async(lambda: len(runs) == 3, timeout=15, message="three delayed jobs to run")
        await wait_until_async(
            lambda: stream_messages_async(nats_server.url, "JSW_LATER"), timeout=10, until=lambda n: n == 0,
            message="the schedules and the fired jobs to be gone",
        )  # fmt: skip
    by_n = {r["n"]: r for r in runs}
    for n, job in zip((1, 2, 3), jobs, strict=True):
        assert job.scheduled_for is not None
        run = by_n[n]
        assert run["id"] == job.id  # the producer's job id, though the server re-published the job
        assert run["at"] >= job.scheduled_for.timestamp(), f"job {n} started before it was due"
        assert run["due"] == job.scheduled_for  # the receipt and the run agree to the millisecond
    assert by_n[3]["id"] == "mine-3"


async def test_bad_delays_fail_at_the_call_and_send_nothing(nats_server: NatsServer) -> None:
    app = _app(nats_server.url, [])
    remind = app.tasks["remind"]
    await remind.aapply((0,))  # the streams exist from here on
    before = await stream_messages_async(nats_server.url, "JSW_LATER")
    naive = datetime.now() + timedelta(minutes=5)
    for kwargs, message in (
        ({"eta": naive}, "no time zone"),
        ({"countdown": -1}, "countdown must be"),
        ({"countdown": 1, "eta": datetime.now(UTC)}, "not both"),
    ):
        with pytest.raises(ConfigurationError, match=message):
            await remind.aapply((1,), **kwargs)
    with pytest.raises(TypeError):
        await remind.aapply(("a", "b"), countdown=5)
    assert await stream_messages_async(nats_server.url, "JSW_LATER") == before
    past = await remind.aapply((2,), eta=datetime.now(UTC) - timedelta(hours=1))
    assert past.scheduled_for is None  # due already: an ordinary job
    await app.aclose()


async def test_the_same_delayed_job_id_twice_makes_one_job(nats_server: NatsServer) -> None:
    runs: list[dict[str, Any]] = []
    app = _app(nats_server.url, runs)
    remind = app.tasks["remind"]
    first = await remind.aapply((1,), countdown=0.5, job_id="once")
    second = await remind.aapply((1,), countdown=0.5, job_id="once")
    assert not first.duplicate and second.duplicate and second.seq == first.seq
    await app.aclose()  # the worker brings its own connection
    async with in_process_worker(app):
        await remind.aapply((2,), countdown=1.5)
        await wait_until_async(lambda: any(r["n"] == 2 for r in runs), timeout=15, message="the later job")
    assert [r["id"] for r in runs].count("once") == 1


async def test_cancel_removes_a_waiting_job_and_says_when_there_is_nothing(nats_server: NatsServer) -> None:
    runs: list[dict[str, Any]] = []
    app = _app(nats_server.url, runs, events=True)
    remind = app.tasks["remind"]
    async with in_process_worker(app):
        doomed = await remind.aapply((1,), countdown=0.8)
        sentinel = await remind.aapply((2,), countdown=1.6)
        assert await app.acancel(doomed.id) is True
        assert await app.acancel(doomed.id) is False  # already cancelled
        assert await app.acancel("never-enqueued") is False
        await wait_until_async(lambda: any(r["n"] == 2 for r in runs), timeout=15, message="the sentinel")
        assert await app.acancel(sentinel.id) is False  # fired and ran
    assert [r["n"] for r in runs] == [2]
    cancelled = app.metrics.registry.get_sample_value(
        "jsworker_jobs_cancelled_total", {"queue": "default", "task": "remind"}
    )
    assert cancelled == 1
    async with connected(nats_server.url) as nc:
        info = await nc.jetstream().stream_info("JSW_LATER_EVENTS", subjects_filter="jsw.later.ev.>")
    kinds = {subject.rsplit(".", 1)[1] for subject in info.state.subjects or {}}
    assert {"scheduled", "cancelled", "started", "succeeded"} <= kinds


@pytest.mark.slow
async def test_a_copy_fired_twice_runs_once_and_one_fired_as_it_was_cancelled_never(
    nats_server: NatsServer,
) -> None:
    """The claims, with real doubled firings: the same delayed job stored under two schedule
    subjects fires twice; a firing claimed as cancelled (what a cancel racing the server's
    firing leaves) is dropped by the worker."""
    runs: list[dict[str, Any]] = []
    app = _app(nats_server.url, runs)
    remind = app.tasks["remind"]
    async with in_process_worker(app):
        job = await remind.aapply((1,), countdown=2.0, job_id="twice")
        conn = await app.producer.connection()
        due = due_ms(job.scheduled_for)  # type: ignore[arg-type]
        async with connected(nats_server.url) as nc:
            js = nc.jetstream()
            # A worker makes the enqueued job a schedule; then it is copied as it stands.
            original = await made_schedule(nc, app.namespace, "default", due, "twice")
            headers = dict(original.headers or {})
            # A copy under another subject: not the same enqueue (no dedup key, no expectation).
            for name in (
                "Nats-Msg-Id",
                "Nats-Expected-Last-Subject-Sequence",
                "Nats-Expected-Last-Subject-Sequence-Subject",
            ):
                headers.pop(name, None)
            await js.publish(f"jsw.later.sched.at.copy.{due}.twice", original.data or b"", headers=headers)
        doomed = await remind.aapply((2,), countdown=1.0)
        assert await claim(conn, app.namespace, doomed.id, due_ms(doomed.scheduled_for), CANCELLED) is None  # type: ignore[arg-type]
        sentinel = await remind.aapply((3,), countdown=2.5)
        await wait_until_async(
            lambda: any(r["id"] == sentinel.id for r in runs), timeout=15, message="sentinel"
        )

        def dropped() -> dict[str, float | None]:
            return {
                reason: app.metrics.registry.get_sample_value(
                    "jsworker_fired_dropped_total", {"queue": "default", "task": "remind", "reason": reason}
                )
                for reason in ("duplicate", "cancelled")
            }

        await wait_until_async(
            dropped,
            timeout=10,
            until=lambda d: d == {"duplicate": 1.0, "cancelled": 1.0},
            message="copies dropped",
        )
        state = await consumer_state_async(nats_server.url, "JSW_LATER", "default")
    assert [r["id"] for r in runs].count("twice") == 1
    assert doomed.id not in [r["id"] for r in runs]
    assert state.pending == 0
