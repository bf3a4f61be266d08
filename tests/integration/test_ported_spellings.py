"""Celery's and arq's spellings, written as a port writes them, against a real server and
worker: each maps onto jsworker's own call."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from jsworker import App, ConfigurationError, JobFailed, Retry
from jsworker.testing import NatsServer
from jsworker.workflows import chain, chord, group

from ..support import wait_until_async
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
    # A workflow starts when it is applied: its options are refused by name, not a TypeError.
    later = chord(group([add.s(1, 1)]), tsum.s())
    with pytest.raises(
        ConfigurationError, match=r"chord\.apply_async\(\) takes no countdown: a workflow starts"
    ):
        later.apply_async(countdown=10)
    with pytest.raises(ConfigurationError, match=r"chord\.apply\(\) takes no countdown, queue"):
        later.apply(countdown=10, queue="x")


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


async def finished_result(app: App, job_id: str) -> Any:
    """The result of job ``job_id`` once it finished (it may not be enqueued yet: an errback)."""
    await wait_until_async(
        lambda: app.astatus(job_id), until=lambda status: status.state.finished, timeout=30,
        message=f"job {job_id} to finish",
    )  # fmt: skip
    return await app.job(job_id).aresult(timeout=30)


async def test_bind_gives_celerys_self(nats_server: NatsServer) -> None:
    app = App("bound", nats_server.url)

    @app.task(bind=True, store_result=True)
    async def charge(self: Any, amount: Decimal) -> dict[str, Any]:
        if self.request.retries == 0:
            raise self.retry(countdown=0.05, exc=ConnectionError("gateway down"))
        r = self.request
        return {
            "id": r.id, "retries": r.retries, "task": r.task, "name": self.name,
            "headers": dict(r.headers), "amount": [type(amount).__name__, str(amount)],
        }  # fmt: skip

    @app.task(bind=True, store_result=True)
    def sync_charge(self: Any, amount: Decimal) -> list[Any]:
        return [self.request.id, self.request.retries, type(amount).__name__]

    @app.task(bind=True, store_result=True, max_retries=5)
    async def give_up(self: Any) -> None:
        raise self.retry(countdown=0.05, exc=ValueError("card declined"), max_retries=1)

    # The arguments are the function's after self: checked, typed and encoded as such.
    with pytest.raises(TypeError, match="too many positional arguments"):
        charge.delay(Decimal(1), Decimal(2))  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="argument 'amount'"):
        charge.delay([1])  # type: ignore[arg-type]
    async with in_process_worker(app):
        job = await charge.aapply((Decimal("9.99"),), job_id="charge-1", headers={"X-Tenant": "acme"})
        assert await job.aresult(timeout=30) == {
            "id": "charge-1", "retries": 1, "task": "charge", "name": "charge",
            "headers": {"X-Tenant": "acme"}, "amount": ["Decimal", "9.99"],
        }  # fmt: skip
        ran = await sync_charge.adelay(Decimal("1.50"))
        assert await ran.aresult(timeout=30) == [ran.id, 0, "Decimal"]
        stopped = await give_up.adelay()
        # max_retries=1 stops the second run (one retry made), under the task's own 5.
        with pytest.raises(JobFailed, match=r"max_retries=1 reached: ValueError: card declined"):
            await stopped.aresult(timeout=30)


async def test_ctx_gives_arqs_ctx(nats_server: NatsServer) -> None:
    app = App("arqctx", nats_server.url)
    with pytest.raises(ConfigurationError, match="bind=True and ctx=True"):
        app.task(bind=True, ctx=True)  # type: ignore[call-overload]

    def takes_none() -> None:
        pass

    with pytest.raises(ConfigurationError, match="ctx=True passes the function's first parameter"):
        app.task(ctx=True)(takes_none)  # type: ignore[arg-type]

    @app.on_startup
    async def open_session() -> None:
        app.state.session = "db-session"

    @app.task(ctx=True, store_result=True)
    async def download(ctx: Mapping[str, Any], url: str) -> dict[str, Any]:
        return {
            "job_id": ctx["job_id"], "job_try": ctx["job_try"], "enqueued": ctx["enqueue_time"].timestamp(),
            "zone": ctx["enqueue_time"].tzname(), "session": ctx["session"], "keys": sorted(ctx), "url": url,
        }  # fmt: skip

    @app.task(ctx=True, store_result=True)
    def sync_download(ctx: Mapping[str, Any], url: str) -> str:
        return f"{ctx['session']} {ctx['job_try']} {url}"

    before = time.time()
    async with in_process_worker(app):
        job = await app.enqueue_job("download", "https://a", _job_id="arq-ctx-1")
        assert job is not None
        got = await job.aresult(timeout=30)
        assert before <= got.pop("enqueued") <= time.time()
        assert got == {
            "job_id": "arq-ctx-1", "job_try": 1, "zone": "UTC", "session": "db-session",
            "keys": ["enqueue_time", "job_id", "job_try", "session"], "url": "https://a",
        }  # fmt: skip
        ran = await sync_download.adelay("https://b")
        assert await ran.aresult(timeout=30) == "db-session 1 https://b"


async def test_async_result(nats_server: NatsServer) -> None:
    app = make_app(nats_server.url)
    add = app.tasks["add"]
    release = asyncio.Event()

    @app.task(store_result=True, max_retries=0)
    async def explode() -> None:
        raise ValueError("boom")

    @app.task(store_result=True)
    async def slow() -> str:
        await release.wait()
        return "done"

    @app.task(store_result=True)
    async def not_yet() -> None:
        raise Retry(delay=300)

    def state_of(job_id: str) -> Any:
        # Sync, as Celery's AsyncResult is: off the loop the worker runs on.
        return asyncio.to_thread(lambda: app.AsyncResult(job_id).state)

    async with in_process_worker(app):
        await (await add.aapply((1, 2), job_id="ar-add")).aresult(timeout=30)

        def succeeded() -> tuple[Any, ...]:
            r = add.AsyncResult("ar-add")
            return r.id, r.state, r.status, r.ready(), r.successful(), r.failed(), r.result, r.get(timeout=30)

        assert await asyncio.to_thread(succeeded) == ("ar-add", "SUCCESS", "SUCCESS", True, True, False, 3, 3)

        failed = await explode.adelay()
        with pytest.raises(JobFailed):
            await failed.aresult(timeout=30)

        def failure() -> tuple[Any, ...]:
            r = app.AsyncResult(failed.id)
            return r.state, r.ready(), r.successful(), r.failed(), r.result, r.get(propagate=False)

        state, ready, successful, is_failed, result, error = await asyncio.to_thread(failure)
        assert (state, ready, successful, is_failed, result) == ("FAILURE", True, False, True, None)
        assert isinstance(error, JobFailed) and error.error_type == "ValueError"
        with pytest.raises(JobFailed, match="boom"):
            await asyncio.to_thread(app.AsyncResult(failed.id).get, 30)

        running = await slow.adelay()
        await wait_until_async(lambda: state_of(running.id), until="STARTED".__eq__, timeout=30)
        assert not await asyncio.to_thread(app.AsyncResult(running.id).ready)
        release.set()
        assert await asyncio.to_thread(app.AsyncResult(running.id).get, 30) == "done"

        retried = await not_yet.adelay()
        await wait_until_async(lambda: state_of(retried.id), until="RETRY".__eq__, timeout=30)
        assert await asyncio.to_thread(app.AsyncResult(retried.id).revoke)
        await wait_until_async(lambda: state_of(retried.id), until="REVOKED".__eq__, timeout=30)

        delayed = await add.aapply((1, 1), countdown=300)
        assert await state_of(delayed.id) == "PENDING"
        with pytest.raises(TimeoutError):
            await asyncio.to_thread(app.AsyncResult(delayed.id).get, 0.2)
        assert await state_of("never-enqueued") == "PENDING"


async def consume_file(path: str) -> str:
    """A task's function at the top level of its module, as Celery names it by default."""
    return f"consumed {path}"


#: Celery's default name of the task: its function's module and name.
CONSUME_FILE = f"{__name__}.consume_file"


async def test_dotted_names_find_the_task_of_that_function(nats_server: NatsServer) -> None:
    app = App("dotted", nats_server.url)
    with pytest.raises(ConfigurationError, match=r"which a dot splits\. Name it 'consume_file'"):
        app.task(name=CONSUME_FILE)(consume_file)
    app.task(store_result=True)(consume_file)
    with pytest.raises(
        ConfigurationError, match=r"Import the module .* or send it by its own name \('archive'"
    ):
        await app.asend_task(f"{__name__}.archive", ["a.pdf"])
    async with in_process_worker(app):
        sent = await asyncio.to_thread(app.send_task, CONSUME_FILE, ["a.pdf"])
        queued = await app.enqueue_job(CONSUME_FILE, "b.pdf")
        assert queued is not None and (sent.task, queued.task) == ("consume_file", "consume_file")
        assert [await sent.aresult(timeout=30), await queued.aresult(timeout=30)] == [
            "consumed a.pdf",
            "consumed b.pdf",
        ]


async def test_chord_takes_celerys_header_and_body(nats_server: NatsServer) -> None:
    app = make_app(nats_server.url)
    add, tsum = app.tasks["add"], app.tasks["tsum"]
    with pytest.raises(ConfigurationError, match=r"chord takes members or header .*: not both"):
        chord([add.s(1, 1)], tsum.s(), header=[add.s(1, 1)])
    with pytest.raises(ConfigurationError, match=r"chord takes callback or body .*: one is missing"):
        chord(header=[add.s(1, 1)])
    async with in_process_worker(app):
        joined = await asyncio.to_thread(
            lambda: chord(header=[add.s(1, 1), add.s(2, 2)], body=tsum.s()).apply_async()
        )
        mixed = await chord(group([add.s(3, 3)]), body=tsum.s()).aapply()
        assert [await joined.aresult(timeout=30), await mixed.aresult(timeout=30)] == [6, 6]


async def test_errbacks_celery_style_get_request_exc_traceback(nats_server: NatsServer) -> None:
    app = App("errbacks", nats_server.url, workflows=True)

    @app.task(max_retries=0)
    async def explode(x: int) -> int:
        raise ValueError(f"boom {x}")

    @app.task
    async def double(x: int) -> int:
        return 2 * x

    @app.task(store_result=True)
    async def on_failure(request: Any, exc: Any, traceback: Any, tag: str) -> list[Any]:
        return [
            request.id, request.task, list(request.args), dict(request.kwargs), type(exc).__name__,
            exc.job_id, exc.error_type, exc.error_message, f"ValueError: {exc.error_message}" in traceback,
            tag,
        ]  # fmt: skip

    @app.task(store_result=True)
    def sync_on_failure(request: Any, exc: Any, traceback: str | None) -> list[Any]:
        return [request.id, request.task, exc.error_message, traceback is not None]

    @app.task(store_result=True)
    async def keep_details(details: dict[str, Any], tag: str) -> list[Any]:
        return [sorted(details), details["job_id"], details["task"], details["error_type"], tag]

    async with in_process_worker(app):
        await explode.aapply((1,), job_id="explode-1", link_error=on_failure.s("tagged"))
        flow = await chain(double.s(1), explode.s(), on_error=sync_on_failure.s()).aapply()
        await explode.aapply((3,), job_id="explode-3", link_error=[keep_details.s("plain")])
        assert await finished_result(app, "explode-1-err") == [
            "explode-1", "explode", [], {}, "JobFailed", "explode-1", "ValueError", "boom 1", True, "tagged",
        ]  # fmt: skip
        assert await finished_result(app, f"{flow.id}-err") == [f"{flow.id}-1", "explode", "boom 2", True]
        # An errback of other parameters gets the failure's details, as before.
        keys = ["error_message", "error_type", "flow", "job_id", "reason", "step", "task", "traceback"]
        details = await finished_result(app, "explode-3-err")
        assert details == [keys, "explode-3", "explode", "ValueError", "plain"]


#: Tasks run in the worker's task processes, which find them by their module and name.
in_processes = App("portedproc", "nats://127.0.0.1:1", workflows=True)


@in_processes.task(bind=True, executor="process", store_result=True)
def bound_in_process(self: Any, x: int) -> list[Any]:
    return [self.name, self.request.id, self.request.retries, x]


@in_processes.task(executor="process", max_retries=0)
def explode_in_process(x: int) -> None:
    raise ValueError(f"boom {x}")


@in_processes.task(executor="process", store_result=True)
def errback_in_process(request: Any, exc: Any, traceback: Any) -> list[Any]:
    return [request.id, request.task, exc.error_type, exc.error_message, "ValueError: boom" in traceback]


async def test_bind_and_errbacks_in_task_processes(nats_server: NatsServer) -> None:
    in_processes.servers = [nats_server.url]
    async with in_process_worker(in_processes):
        job = await bound_in_process.aapply((7,), job_id="bound-proc")
        assert await job.aresult(timeout=30) == ["bound_in_process", "bound-proc", 0, 7]
        await explode_in_process.aapply((2,), job_id="explode-proc", link_error=errback_in_process.s())
        assert await finished_result(in_processes, "explode-proc-err") == [
            "explode-proc", "explode_in_process", "ValueError", "boom 2", True,
        ]  # fmt: skip
