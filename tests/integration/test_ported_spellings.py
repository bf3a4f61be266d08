"""Celery's and arq's spellings of an enqueue, written as a port writes them, against a real
server and worker: each maps onto jsworker's own call."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jsworker import App, ConfigurationError
from jsworker.testing import NatsServer
from jsworker.workflows import chord, group

from .workers import in_process_worker

pytestmark = pytest.mark.anyio


def make_app(url: str) -> App:
    app = App("spelled", url, workflows=True)

    @app.task(store_result=True)
    async def add(x: int, y: int) -> int:
        return x + y

    @app.task(store_result=True)
    async def tsum(values: list[int]) -> int:
        return sum(values)

    return app


async def test_celery_spellings(nats_server: NatsServer) -> None:
    app = make_app(nats_server.url)
    add, tsum = app.tasks["add"], app.tasks["tsum"]

    def web_view() -> list[Any]:
        # As a Celery app's sync code calls them.
        return [
            add.apply_async((1, 2), task_id="order-1", countdown=0.1, expires=timedelta(minutes=5)),
            add.apply_async(args=[2], kwargs={"y": 3}, expires=datetime.now(UTC) + timedelta(minutes=5)),
            add.s(3).delay(4),
            add.s(4, 5).apply_async(task_id="order-2"),
            group([add.s(1, 1), add.s(2, 2)]).delay(),
            chord(group([add.s(1, 1), add.s(2, 2)]), tsum.s()).apply_async(),
        ]

    async with in_process_worker(app):
        first, second, third, fourth, flow, joined = await asyncio.to_thread(web_view)
        assert first.id == "order-1" and fourth.id == "order-2"
        assert [await j.aresult(timeout=30) for j in (first, second, third, fourth)] == [3, 5, 7, 9]
        assert await flow.aresult(timeout=30) == [2, 4]
        assert await joined.aresult(timeout=30) == 6
    with pytest.raises(ConfigurationError, match="apply_async takes no priority, retry"):
        await asyncio.to_thread(add.apply_async, (1, 2), retry=True, priority=3)


async def test_arq_spelling(nats_server: NatsServer) -> None:
    app = make_app(nats_server.url)
    async with in_process_worker(app):
        job = await app.enqueue_job("add", 1, 2, _job_id="arq-1", _defer_by=0.1)
        assert job is not None and job.id == "arq-1"
        # arq answers None for an id that is taken; jsworker's own calls, the receipt.
        assert await app.enqueue_job("add", 1, 2, _job_id="arq-1") is None
        assert await job.aresult(timeout=30) == 3
        later = await app.enqueue_job(
            "add", x=2, y=2, _defer_until=datetime.now(UTC) + timedelta(seconds=0.2)
        )
        assert later is not None and await later.aresult(timeout=30) == 4
