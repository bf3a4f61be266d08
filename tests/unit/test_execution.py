"""Running one delivered job: identifying it, calling its task, classifying the outcome."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from jsworker import App, Reject, Retry, current_job
from jsworker._enqueue.receipt import JobContext
from jsworker._errors import JsworkerError, SerializationError
from jsworker._observability.logging import add_job_context
from jsworker._runtime.execution import Executor, JobRun, as_job_run
from jsworker._runtime.outcomes import OutcomeKind

from ..support import wait_until_async

pytestmark = pytest.mark.anyio

QUEUE = "default"


@dataclass
class FakeDelivery:
    """The attributes of a Delivery that as_job_run/Executor read."""

    subject: str
    body: bytes = b'{"args":[],"kwargs":{}}'
    headers: dict[str, str] = field(default_factory=dict)
    attempt: int = 1
    stream_seq: int = 5
    reply: str = "$JS.ACK.S.C.1.5.5.1795325908066727278.0"


@pytest.fixture
def app() -> App:
    return App("unit", "nats://127.0.0.1:1", max_retries=3)


def _job(
    app: App,
    task: str,
    body: bytes = b'{"args":[],"kwargs":{}}',
    *,
    attempt: int = 1,
    headers: dict[str, str] | None = None,
) -> JobRun:
    h = {"Nats-Msg-Id": "job-1", "Jsw-Task": task} if headers is None else headers
    d = FakeDelivery(app.namespace.job_subject(QUEUE, task), body, h, attempt=attempt)
    return as_job_run(app, QUEUE, d)  # type: ignore[arg-type]


async def _run(app: App, job: JobRun) -> Any:
    return await Executor(app, threads=4).run(job)


# -- as_job_run ---------------------------------------------------------------------------


def test_identify_uses_headers(app: App) -> None:
    """Job id and task come from Nats-Msg-Id and Jsw-Task when present."""

    @app.task
    def t() -> None:
        pass

    d = FakeDelivery("jsw.unit.q.default.other", headers={"Nats-Msg-Id": "abc", "Jsw-Task": "t"})
    run = as_job_run(app, QUEUE, d)  # type: ignore[arg-type]
    assert (run.job_id, run.task_name, run.queue, run.task) == ("abc", "t", QUEUE, t)


def test_identify_falls_back_to_subject_task_token(app: App) -> None:
    """Without a Jsw-Task header the task name is the subject's last token."""

    @app.task
    def t() -> None:
        pass

    d = FakeDelivery("jsw.unit.q.default.t", headers={"Nats-Msg-Id": "abc"})
    run = as_job_run(app, QUEUE, d)  # type: ignore[arg-type]
    assert run.task_name == "t"
    assert run.task is t


def test_identify_falls_back_to_sequence_id(app: App) -> None:
    """Without Nats-Msg-Id the job id is seq-<stream sequence>."""
    d = FakeDelivery("jsw.unit.q.default.t", headers={}, stream_seq=42)
    run = as_job_run(app, QUEUE, d)  # type: ignore[arg-type]
    assert run.job_id == "seq-42"
    assert run.task_name == "t"


def test_identify_foreign_subject_without_header_is_unknown(app: App) -> None:
    """A foreign subject with no task header gives an empty name and no task."""

    @app.task
    def t() -> None:
        pass

    d = FakeDelivery("jsw.otherapp.q.default.t", headers={})
    run = as_job_run(app, QUEUE, d)  # type: ignore[arg-type]
    assert run.task_name == ""
    assert run.task is None


# -- outcomes ---------------------------------------------------------------------------


async def test_async_task_succeeds(app: App) -> None:
    """An async task that returns gives SUCCEEDED, having received its arguments."""
    seen: list[Any] = []

    @app.task
    async def t(a: int, b: str = "") -> None:
        seen.append((a, b))

    out = await _run(app, _job(app, "t", b'{"args":[1],"kwargs":{"b":"x"}}'))
    assert out.kind is OutcomeKind.SUCCEEDED
    assert out.error is None
    assert seen == [(1, "x")]


async def test_sync_task_succeeds_in_a_thread(app: App) -> None:
    """A sync task runs off the event loop thread and gives SUCCEEDED."""
    import threading

    threads: list[int] = []

    @app.task
    def t(a: int) -> None:
        threads.append(threading.get_ident())

    out = await _run(app, _job(app, "t", b'{"args":[1]}'))
    assert out.kind is OutcomeKind.SUCCEEDED
    assert threads and threads[0] != threading.get_ident()


@pytest.mark.parametrize("is_async", [True, False])
async def test_raising_task_fails_with_the_exception(app: App, is_async: bool) -> None:
    """A task that raises gives FAILED carrying the exception and its description."""
    boom = ValueError("boom")
    if is_async:

        @app.task(name="t")
        async def t_async() -> None:
            raise boom

    else:

        @app.task(name="t")
        def t_sync() -> None:
            raise boom

    out = await _run(app, _job(app, "t"))
    assert out.kind is OutcomeKind.FAILED
    assert out.error is boom
    assert out.reason == "ValueError: boom"


async def test_retry_gives_retry_with_delay(app: App) -> None:
    """Raising Retry(delay=2) gives RETRY with that delay and reason."""

    @app.task
    async def t() -> None:
        raise Retry(delay=2, reason="later please")

    out = await _run(app, _job(app, "t"))
    assert out.kind is OutcomeKind.RETRY
    assert out.retry_delay == 2
    assert out.reason == "later please"
    assert isinstance(out.error, Retry)


async def test_sync_reject_gives_rejected(app: App) -> None:
    """Raising Reject (from a sync task) gives REJECTED with its reason."""

    @app.task
    def t() -> None:
        raise Reject("not valid")

    out = await _run(app, _job(app, "t"))
    assert out.kind is OutcomeKind.REJECTED
    assert out.reason == "not valid"


async def test_async_task_past_timeout_times_out(app: App) -> None:
    """An async task running past its timeout is cancelled and gives TIMED_OUT."""

    @app.task(timeout=0.05)
    async def t() -> None:
        await asyncio.sleep(5)

    start = time.monotonic()
    out = await _run(app, _job(app, "t"))
    assert out.kind is OutcomeKind.TIMED_OUT
    assert "0.05" in out.reason
    assert time.monotonic() - start < 1.0


async def test_a_timed_out_sync_call_is_waited_for_and_counted(app: App) -> None:
    """A sync task past its timeout gives TIMED_OUT only once its thread has returned, so the
    next attempt can never run beside it; the overrun is counted."""
    finished = threading.Event()
    release = threading.Event()

    @app.task(timeout=0.05)
    def t() -> None:
        release.wait(10)
        finished.set()

    def overruns() -> float:
        sample = app.metrics.registry.get_sample_value(
            "jsworker_sync_overruns_total", {"queue": QUEUE, "task": "t"}
        )
        return sample or 0.0

    before = overruns()
    run = asyncio.ensure_future(_run(app, _job(app, "t")))
    await wait_until_async(lambda: overruns() > before, timeout=10, message="the overrun to be counted")
    assert not run.done()  # past the timeout, still waiting for the thread
    release.set()
    out = await run
    assert finished.is_set()
    assert out.kind is OutcomeKind.TIMED_OUT


@pytest.mark.parametrize("timeout", [None, 5.0])
async def test_task_raising_timeout_error_itself_is_a_failure(app: App, timeout: float | None) -> None:
    """A TimeoutError raised by the task (not by its timeout) is FAILED, not TIMED_OUT."""

    @app.task(timeout=timeout)
    async def t() -> None:
        raise TimeoutError("upstream timed out")

    out = await _run(app, _job(app, "t"))
    assert out.kind is OutcomeKind.FAILED
    assert "upstream timed out" in out.reason


async def test_unknown_task_is_bad_input(app: App) -> None:
    """A job naming a task the app does not have gives BAD_INPUT."""
    out = await _run(app, _job(app, "nope"))
    assert out.kind is OutcomeKind.BAD_INPUT
    assert "nope" in out.reason


async def test_undecodable_body_is_bad_input(app: App) -> None:
    """A body that does not decode gives BAD_INPUT without calling the task."""
    called = []

    @app.task
    def t() -> None:
        called.append(1)

    out = await _run(app, _job(app, "t", b"\xff{not json"))
    assert out.kind is OutcomeKind.BAD_INPUT
    assert isinstance(out.error, SerializationError)
    assert called == []


async def test_wrong_arguments_are_bad_input(app: App) -> None:
    """Arguments that do not fit the signature give BAD_INPUT without calling the task."""
    called = []

    @app.task
    def t(x: int) -> None:
        called.append(x)

    out = await _run(app, _job(app, "t", b'{"args":[1,2,3]}'))
    assert out.kind is OutcomeKind.BAD_INPUT
    assert isinstance(out.error, TypeError)
    assert out.reason.startswith("bad arguments")
    assert called == []


async def test_delivery_beyond_attempts_is_poison(app: App) -> None:
    """A delivery numbered above max_retries+1 is POISON and the task is not run."""
    called = []

    @app.task(max_retries=2)
    def t() -> None:
        called.append(1)

    out = await _run(app, _job(app, "t", attempt=4))
    assert out.kind is OutcomeKind.POISON
    assert called == []
    ok = await _run(app, _job(app, "t", attempt=3))
    assert ok.kind is OutcomeKind.SUCCEEDED
    assert called == [1]


@pytest.mark.parametrize("is_async", [True, False])
async def test_current_job_inside_task(app: App, is_async: bool) -> None:
    """current_job() inside an async or sync task describes the job being run."""
    seen: list[JobContext] = []
    if is_async:

        @app.task(name="t", max_retries=2)
        async def t_async() -> None:
            seen.append(current_job())

    else:

        @app.task(name="t", max_retries=2)
        def t_sync() -> None:
            seen.append(current_job())

    headers = {"Nats-Msg-Id": "order-7", "Jsw-Task": "t", "Jsw-Enqueued-At": "1500000000000000000"}
    out = await _run(app, _job(app, "t", attempt=3, headers=headers))
    assert out.kind is OutcomeKind.SUCCEEDED
    (ctx,) = seen
    assert (ctx.id, ctx.task, ctx.queue, ctx.attempt, ctx.max_retries) == ("order-7", "t", QUEUE, 3, 2)
    assert ctx.enqueued_at == pytest.approx(1.5e9)
    assert ctx.is_last_attempt
    assert ctx.headers["Jsw-Task"] == "t"
    with pytest.raises(JsworkerError):
        current_job()


@pytest.mark.parametrize("is_async", [True, False])
async def test_log_processor_adds_the_running_job(app: App, is_async: bool) -> None:
    """add_job_context fills job_id, task, queue and attempt inside an async or sync task,
    keeps fields the event already has, and adds nothing outside a job."""
    seen: list[dict[str, Any]] = []

    def log_event() -> None:
        seen.append(add_job_context(None, "info", {"event": "e", "queue": "mine"}))

    if is_async:

        @app.task(name="t")
        async def t_async() -> None:
            log_event()

    else:

        @app.task(name="t")
        def t_sync() -> None:
            log_event()

    headers = {"Nats-Msg-Id": "order-8", "Jsw-Task": "t"}
    assert (await _run(app, _job(app, "t", attempt=2, headers=headers))).kind is OutcomeKind.SUCCEEDED
    log_event()
    inside, outside = seen
    assert inside == {"event": "e", "queue": "mine", "job_id": "order-8", "task": "t", "attempt": 2}
    assert outside == {"event": "e", "queue": "mine"}


async def test_bad_enqueued_at_header_gives_none(app: App) -> None:
    """An unparseable Jsw-Enqueued-At header yields enqueued_at None instead of failing."""
    seen: list[JobContext] = []

    @app.task
    async def t() -> None:
        seen.append(current_job())

    headers = {"Nats-Msg-Id": "x", "Jsw-Task": "t", "Jsw-Enqueued-At": "yesterday"}
    out = await _run(app, _job(app, "t", headers=headers))
    assert out.kind is OutcomeKind.SUCCEEDED
    assert seen[0].enqueued_at is None
    assert not seen[0].is_last_attempt


@pytest.mark.parametrize("is_async", [True, False])
async def test_system_exit_in_task_is_a_failure(app: App, is_async: bool) -> None:
    """A task calling sys.exit() gives FAILED instead of ending the process."""
    if is_async:

        @app.task(name="t")
        async def t_async() -> None:
            sys.exit(3)

    else:

        @app.task(name="t")
        def t_sync() -> None:
            sys.exit(3)

    out = await _run(app, _job(app, "t"))
    assert out.kind is OutcomeKind.FAILED
    assert isinstance(out.error, SystemExit)


# -- the call with and without a timeout scope ------------------------------------------

_BEHAVIOURS: dict[str, Any] = {
    "returns": lambda: 42,
    "raises": lambda: (_ for _ in ()).throw(ValueError("bad")),
    "retry": lambda: (_ for _ in ()).throw(Retry(delay=3, reason="later")),
    "reject": lambda: (_ for _ in ()).throw(Reject("never")),
    "exits": lambda: sys.exit(3),
}


@pytest.mark.parametrize("behaviour", sorted(_BEHAVIOURS))
@pytest.mark.parametrize("is_async", [True, False], ids=["async", "sync"])
async def test_the_timeout_free_path_classifies_like_the_timed_one(behaviour: str, is_async: bool) -> None:
    """Tasks without a timeout skip the timeout scope: their outcomes must be the ones a
    timed task gets for the same behaviour (a timeout that never fires)."""
    outcomes = []
    body = _BEHAVIOURS[behaviour]
    for timeout in (None, 60.0):
        app = App("unit", "nats://127.0.0.1:1")
        if is_async:

            async def run_async() -> Any:
                return body()

            app.task(name="t", timeout=timeout)(run_async)
        else:

            def run_sync() -> Any:
                return body()

            app.task(name="t", timeout=timeout)(run_sync)
        outcome = await _run(app, _job(app, "t"))
        outcomes.append(
            (outcome.kind, outcome.reason, type(outcome.error), outcome.retry_delay, outcome.retryable)
        )
    assert outcomes[0] == outcomes[1]
