"""Middleware composition, enqueue stamping, hooks' state and ``job_context``, without a
server (what the server does with them is in tests/integration/test_middleware.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any, cast

import pytest

from jsworker import App, ConfigurationError, Reject, current_job
from jsworker._core.middleware import Middleware, MiddlewareChain, OutgoingJob, Settled
from jsworker._enqueue.receipt import JobContext
from jsworker._runtime.execution import JobRun
from jsworker._runtime.interceptors.middleware import AppMiddleware
from jsworker._runtime.outcomes import ACK, Outcome, OutcomeKind, Settlement
from jsworker._runtime.pipeline import Pipeline
from jsworker.jetstream.delivery import Delivery
from jsworker.testing import job_context

pytestmark = pytest.mark.anyio


class Boom(Exception):
    pass


class Named(Middleware):
    def __init__(self, name: str, trail: list[str]) -> None:
        self.name, self.trail = name, trail

    async def around_run(self, job: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        self.trail.append(f"enter {self.name}")
        value = await call_next()
        self.trail.append(f"leave {self.name}")
        return value


def pipeline(middleware: list[Middleware], outcome: Outcome | None = None) -> Pipeline:
    """The job pipeline with ``middleware`` alone, around a call that ends in ``outcome``."""

    async def call(job: JobRun) -> Outcome:
        assert outcome is not None
        return outcome

    async def nothing(job: JobRun) -> None:
        return None

    return Pipeline([AppMiddleware(m) for m in middleware], call, lambda job: None, nothing, nothing)


async def test_the_first_middleware_is_outermost() -> None:
    trail: list[str] = []

    class Task(Middleware):
        # The innermost: stands in for the task, as the pipeline's call is fixed.
        async def around_run(self, job: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
            trail.append("task")
            return 7

    run = pipeline([Named("a", trail), Named("b", trail), Middleware(), Task()]).run
    assert (await run(_job())).value == 7
    assert trail == ["enter a", "enter b", "task", "leave b", "leave a"]


def test_only_overridden_hooks_are_called() -> None:
    chain = MiddlewareChain([Middleware(), Middleware()])
    assert len(chain) == 2
    assert not chain.stamps
    # Neither is a stage of the pipeline: the run is the call itself, and nothing waits for acks.
    plain = pipeline(list(chain), Outcome(OutcomeKind.SUCCEEDED))
    assert plain.run is not None and not plain.waits_for_acks and not plain.finals
    assert [AppMiddleware(m).hooks() for m in chain] == [frozenset(), frozenset()]
    assert AppMiddleware(Failing([])).hooks() == {"after_settled"}
    with pytest.raises(ConfigurationError, match="Middleware instances"):
        MiddlewareChain([object()])  # type: ignore[list-item]


class Stamper(Middleware):
    def __init__(self, headers: dict[str, str] | None = None, fail: bool = False) -> None:
        self.headers, self.fail = headers or {}, fail
        self.seen: list[OutgoingJob] = []

    def on_enqueue(self, job: OutgoingJob) -> None:
        self.seen.append(job)
        if self.fail:
            raise Boom("refused by policy")
        job.headers.update(self.headers)


def test_on_enqueue_sees_the_job_and_adds_headers_after_the_callers() -> None:
    stamper = Stamper({"X-Tenant": "acme"})
    app = App("mwunit", middleware=[stamper])

    @app.task
    def add(x: int, y: int) -> int:
        return x + y

    call = add.make_call((1,), {"y": 2}, "job-1", headers={"X-Caller": "1"})
    assert call.headers == {"X-Caller": "1", "X-Tenant": "acme"}
    seen = stamper.seen[0]
    assert (seen.id, seen.task, seen.queue, seen.kind, seen.args, dict(seen.kwargs)) == (
        "job-1", "add", "default", "job", (1,), {"y": 2},
    )  # fmt: skip


def test_a_failing_on_enqueue_fails_the_enqueue_before_anything_is_sent() -> None:
    # No server at this address: the error comes before any connection is tried.
    app = App("mwunit", "nats://127.0.0.1:1", middleware=[Stamper(fail=True)])

    @app.task
    def noop() -> None: ...

    with pytest.raises(Boom, match="refused by policy"):
        noop.delay()


def test_headers_a_middleware_sets_are_checked_like_a_callers() -> None:
    app = App("mwunit", middleware=[Stamper({"Nats-Msg-Id": "forged"})])

    @app.task
    def noop() -> None: ...

    with pytest.raises(ConfigurationError, match=r"middleware set bad headers.*reserved"):
        noop.make_call((), None, None)


class Failing(Middleware):
    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    async def on_settled(self, job: JobContext, settled: Settled) -> None:
        self.seen.append(settled.state)
        raise Boom("audit table down")


async def test_a_failing_on_settled_is_logged_and_the_next_still_runs() -> None:
    seen: list[str] = []
    after = pipeline([Failing(seen), Failing(seen)]).after(
        _job(), Settlement(Outcome(OutcomeKind.SUCCEEDED), ACK)
    )
    assert after is not None
    await after
    assert seen == ["succeeded", "succeeded"]


def test_job_context_makes_current_job_work_and_nests() -> None:
    with job_context("outer", attempt=2, headers={"x": "1"}):
        assert (current_job().id, current_job().attempt, current_job().headers) == ("outer", 2, {"x": "1"})
        with job_context("inner", cancelled=True):
            assert current_job().id == "inner" and current_job().cancelled
        assert current_job().id == "outer" and not current_job().cancelled
    with pytest.raises(Exception, match="outside a job"):
        current_job()


def test_app_state_says_what_is_missing_and_checks_types() -> None:
    app = App("mwunit")
    with pytest.raises(AttributeError, match="on_startup"):
        _ = app.state.pool
    app.state.pool = "a pool"
    assert app.state.get("pool", str) == "a pool"
    with pytest.raises(TypeError, match="not a int"):
        app.state.get("pool", int)


def test_hooks_are_kept_in_order() -> None:
    app = App("mwunit")

    @app.on_startup
    async def first() -> None: ...

    @app.on_startup
    def second() -> None: ...

    @app.on_shutdown
    def last() -> None: ...

    assert app.hooks.startup == [first, second] and app.hooks.shutdown == [last]


class Raising(Middleware):
    def __init__(self, error: BaseException | None = None, value: Any = None) -> None:
        self.error, self.value = error, value

    async def around_run(self, job: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        try:
            got = await call_next()
        except ValueError:
            return "recovered"
        if self.error is not None:
            raise self.error
        return self.value if self.value is not None else got


def _job() -> JobRun:
    delivery = SimpleNamespace(attempt=1, headers={}, stream_seq=1, stored_at=None)
    return JobRun(cast(Delivery, delivery), "j1", "t", "default")


async def test_what_around_run_raises_or_returns_is_the_jobs() -> None:
    ok = Outcome(OutcomeKind.SUCCEEDED, value=1)
    assert (await pipeline([Raising(Reject("policy"))], ok).run(_job())).kind is OutcomeKind.REJECTED
    raised = await pipeline([Raising(Boom("x"))], ok).run(_job())
    assert raised.kind is OutcomeKind.FAILED and isinstance(raised.error, Boom)
    assert (await pipeline([Raising(value=2)], ok).run(_job())).value == 2
    # The task's own failure keeps its classification when middleware lets it through, however
    # many layers it crosses...
    timed_out = Outcome(OutcomeKind.TIMED_OUT, "slow", error=TimeoutError("slow"), retryable=False)
    assert await pipeline([Raising(), Raising()], timed_out).run(_job()) is timed_out
    # ...and a middleware that handles it makes the run a success.
    failed_run = Outcome(OutcomeKind.FAILED, "bad", error=ValueError("bad"))
    assert (await pipeline([Raising()], failed_run).run(_job())).value == "recovered"
