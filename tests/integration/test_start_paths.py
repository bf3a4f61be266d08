"""A job that finds a free slot starts from the pull loop's receive callback; one that has to
wait goes through the buffer and the queue loop. Both routes must settle jobs alike."""

from __future__ import annotations

import asyncio
import contextvars
from collections import Counter
from typing import TYPE_CHECKING

import pytest

from jsworker import App, Reject
from jsworker._runtime.settings import PREFETCH_GROWS_TO
from jsworker._runtime.worker import Worker

from ..support import wait_until_async
from .workers import in_process_worker

if TYPE_CHECKING:
    from jsworker.testing import NatsServer

pytestmark = pytest.mark.anyio

OUTCOMES = ["ok", "fail", "reject"] * 20


def _app(url: str, name: str) -> App:
    app = App(name, url, max_retries=0)

    @app.task
    async def job(outcome: str) -> None:
        if outcome == "fail":
            raise ValueError("failed")
        if outcome == "reject":
            raise Reject("rejected")

    return app


async def _settle_all(
    url: str, name: str, buffered_only: bool, monkeypatch: pytest.MonkeyPatch
) -> Counter[str]:
    if buffered_only:
        # Every job takes the buffer and queue-loop route.
        monkeypatch.setattr(Worker, "_start_at_once", lambda self, queue, partition, delivery: False)
    app = _app(url, name)
    try:
        async with in_process_worker(app, concurrency=4) as worker:
            await app.tasks["job"].adelay_many([(o,) for o in OUTCOMES])
            await wait_until_async(
                lambda: sum(worker.counts[k] for k in ("succeeded", "failed", "rejected")) >= len(OUTCOMES),
                timeout=30,
                message="every job to settle",
            )
            return Counter({k: v for k, v in worker.counts.items() if not k.startswith("engine.")})
    finally:
        monkeypatch.undo()
        await app.aclose()


async def test_both_start_routes_settle_alike(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_arrival = await _settle_all(nats_server.url, "routes_a", False, monkeypatch)
    buffered = await _settle_all(nats_server.url, "routes_b", True, monkeypatch)
    assert on_arrival == buffered
    assert (on_arrival["succeeded"], on_arrival["failed"], on_arrival["rejected"]) == (20, 20, 20)


@pytest.mark.parametrize(("settings", "grows_to"), [({}, PREFETCH_GROWS_TO), ({"max_messages": 7}, None)])
async def test_pull_loops_grow_unless_the_prefetch_is_fixed(
    nats_server: NatsServer, settings: dict[str, int], grows_to: int | None
) -> None:
    """Without --max-messages a worker's pull loops hold min(concurrency, 128) jobs and grow
    with the pace; --max-messages fixes the bound."""
    app = _app(nats_server.url, "grow" if grows_to else "fixed")
    async with in_process_worker(app, concurrency=4, **settings) as worker:
        consumer = worker._consumers["default", 0]
        assert consumer.max_messages == settings.get("max_messages", 4)
        assert consumer.grow_to == grows_to


async def test_a_slot_goes_on_with_the_next_buffered_job_in_the_context_each_job_begins_with(
    nats_server: NatsServer,
) -> None:
    """A job done while the next one waits in the buffer for its slot runs that one in its
    own task (no task, no wake-up per job at full load); a job that set context variables
    leaves them behind: the next one runs in a task of its own, in the worker's context."""
    app = App("hand_on", nats_server.url)
    seen = contextvars.ContextVar("seen", default="unset")
    runs: list[tuple[int, int, str]] = []
    workers: list[Worker] = []

    @app.task
    async def job(i: int, sets: bool) -> None:
        runs.append((i, id(asyncio.current_task()), seen.get()))
        if sets:
            seen.set("left by a job")
        # Done only once the next job is buffered and its pull loop waits for this slot: the
        # hand-on is what is tested.
        if i < 9:
            await wait_until_async(_next_waits, message=f"job {i + 1} waiting")

    def _next_waits() -> bool:
        (worker,) = workers
        return bool(worker._limiter._waiters and worker._consumers["default", 0].buffered())

    async with in_process_worker(app, concurrency=1) as worker:
        workers.append(worker)
        await job.adelay_many([(i, i == 4) for i in range(10)])
        await wait_until_async(lambda: worker.counts["succeeded"] == 10, timeout=30, message="10 jobs")
    assert [i for i, _, _ in runs] == list(range(10))
    assert {value for _, _, value in runs} == {"unset"}
    tasks = [task for _, task, _ in runs]
    # One task for jobs 0-4; after job 4 set a variable, another for jobs 5-9.
    assert len(set(tasks[:5])) == 1 and len(set(tasks[5:])) == 1 and tasks[4] != tasks[5]
