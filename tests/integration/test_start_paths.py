"""A job that finds a free slot starts from the pull loop's receive callback; one that has to
wait goes through the buffer and the queue loop. Both routes must settle jobs alike."""

from __future__ import annotations

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
