"""Per-call options and enqueue by name, against a real nats-server and an in-process worker:
a job routed to another queue, the caller's own headers (in the task and in its dead letter),
reserved header names refused, and a task enqueued by a process that lacks its code."""

from __future__ import annotations

from typing import Any

import pytest

from jsworker import App, ConfigurationError, Reject, current_job
from jsworker._deadletters import DeadLetters
from jsworker.testing import NatsServer

from ..support import wait_until_async
from .workers import in_process_worker

pytestmark = pytest.mark.anyio


def _worker_app(url: str, seen: list[dict[str, Any]]) -> App:
    app = App("percall", url)

    @app.task(queue="default")
    async def work(n: int) -> int:
        job = current_job()
        seen.append({"n": n, "queue": job.queue, "tenant": job.headers.get("X-Tenant")})
        return n

    @app.task(max_retries=0)
    async def refuse(n: int) -> None:
        raise Reject("never")

    # A queue no task declares as its own: only routed jobs arrive there.
    @app.task(queue="bulk")
    async def other() -> None: ...

    return app


async def test_a_call_goes_to_another_queue_with_headers_of_its_own(nats_server: NatsServer) -> None:
    seen: list[dict[str, Any]] = []
    app = _worker_app(nats_server.url, seen)
    work, refuse = app.tasks["work"], app.tasks["refuse"]
    with pytest.raises(ConfigurationError, match="reserved"):
        await work.aapply((1,), headers={"Nats-Msg-Id": "mine"})
    with pytest.raises(ConfigurationError, match="reserved"):
        await work.aapply((1,), headers={"jsw-task": "other"})
    with pytest.raises(ConfigurationError, match="line break"):
        await work.aapply((1,), headers={"X-Bad": "a\r\nNats-Msg-Id: x"})
    async with in_process_worker(app, queues=["bulk"]):
        routed = await work.aapply((7,), queue="bulk", headers={"X-Tenant": "acme"})
        assert routed.queue == "bulk"
        await wait_until_async(lambda: seen, timeout=10, message="the routed job")
        dead = await refuse.aapply((1,), queue="bulk", headers={"X-Tenant": "acme"})
        async with DeadLetters(app) as dlq:
            await wait_until_async(
                lambda: dlq.count(), until=lambda n: n == 1, timeout=10, message="a dead letter"
            )
            (letter,) = await dlq.list()
    assert seen == [{"n": 7, "queue": "bulk", "tenant": "acme"}]
    assert letter.job_id == dead.id and letter.headers.get("X-Tenant") == "acme"


async def test_a_task_is_enqueued_by_name_without_its_code(nats_server: NatsServer) -> None:
    """A process with no task of that name enqueues it; the worker runs it; wrong arguments,
    which nothing could check at enqueue, end in a dead letter with the reason."""
    seen: list[dict[str, Any]] = []
    worker_app = _worker_app(nats_server.url, seen)
    api = App("percall", nats_server.url)  # declares no task at all
    job = await api.asend_task("work", (3,), headers={"X-Tenant": "t1"})
    bad = await api.asend_task("work", ("a", "b", "c"))
    later = await api.asend_task("work", (4,), countdown=0.5)
    assert job.queue == "default" and "work" not in api.tasks
    await api.aclose()
    async with in_process_worker(worker_app):
        await wait_until_async(lambda: len(seen) == 2, timeout=15, message="both jobs to run")
        async with DeadLetters(worker_app) as dlq:
            await wait_until_async(
                lambda: dlq.count(), until=lambda n: n == 1, timeout=10, message="a dead letter"
            )
            (letter,) = await dlq.list()
    assert sorted(s["n"] for s in seen) == [3, 4] and later.scheduled_for is not None
    assert letter.job_id == bad.id and "bad arguments" in letter.reason
