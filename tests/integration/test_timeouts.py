"""A timeout is an exception like any other for retries, against a real nats-server and an
in-process worker: retried by default, dead-lettered at once when the task says not to."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from jsworker import App, JobFailed, JobTimeout, current_job
from jsworker.testing import NatsServer

from .workers import in_process_worker

pytestmark = pytest.mark.anyio


async def test_retry_on_and_dont_retry_on_name_timeouts(nats_server: NatsServer) -> None:
    runs: Counter[str] = Counter()
    app = App("slow", nats_server.url, retry_backoff=0.01, retry_backoff_max=0.01, results=True)

    async def stall() -> None:
        runs[current_job().task] += 1
        await asyncio.sleep(30)

    app.task(timeout=0.1, max_retries=2, name="default_rules")(stall)
    app.task(timeout=0.1, max_retries=2, dont_retry_on=(JobTimeout,), name="never_again")(stall)
    app.task(timeout=0.1, max_retries=2, retry_on=(ConnectionError,), name="only_connections")(stall)
    app.task(timeout=0.1, max_retries=2, retry_on=(TimeoutError,), name="timeouts_too")(stall)
    jobs = {name: await app.tasks[name].adelay() for name in app.tasks}
    await app.aclose()  # the worker's connection takes over this loop's enqueues
    async with in_process_worker(app):
        failures = {}
        for name, job in jobs.items():
            with pytest.raises(JobFailed) as failed:
                await job.aresult(timeout=20)
            failures[name] = failed.value
    assert runs == {"default_rules": 3, "never_again": 1, "only_connections": 1, "timeouts_too": 3}
    assert failures["never_again"].error_type == "JobTimeout"
    assert "not retryable" in failures["never_again"].reason
    await app.aclose()
