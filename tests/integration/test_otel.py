"""Tracing with OpenTelemetry (jsworker.contrib.otel) against a real server and an in-process
worker, spans recorded by the real SDK: a job joins the trace it was enqueued in, failed and
retried runs are recorded as such, a chain of jobs (from async and sync tasks) is one trace,
schedules carry no trace, and without a configured provider nothing is added."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from itertools import pairwise
from typing import Any

import pytest

from jsworker import App, current_job
from jsworker.testing import NatsServer

from ..support import need, wait_until_async
from .workers import in_process_worker

try:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind, StatusCode

    from jsworker.contrib.otel import TracingMiddleware
except ImportError as exc:
    need(False, f"OpenTelemetry is not installed ({exc}): pip install -e '.[dev]'")

pytestmark = pytest.mark.anyio


class Traces:
    """An SDK provider of its own (the global one can be set only once per process) whose
    spans are kept in memory as they end."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("test")

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.spans() if span.name == name]

    def of_task(self, name: str, task: str) -> list[ReadableSpan]:
        return [s for s in self.named(name) if (s.attributes or {}).get("jsworker.task") == task]

    async def wait(self, name: str, task: str, count: int = 1) -> list[ReadableSpan]:
        """The ``count`` spans ``name`` of ``task``, once that many have ended."""
        return await wait_until_async(
            lambda: self.of_task(name, task),
            until=lambda spans: len(spans) >= count,
            timeout=30,
            message=f"{count} {name!r} spans of {task}",
        )


@pytest.fixture
def traces() -> Iterator[Traces]:
    traces = Traces()
    yield traces
    traces.provider.shutdown()


@pytest.fixture
def apps() -> Iterator[list[App]]:
    """The apps a test made, closed after it (the sync bridge of ``step_b.delay()`` too)."""
    made: list[App] = []
    yield made
    for app in made:
        app.close()


def _app(apps: list[App], url: str, traces: Traces, middleware: TracingMiddleware | None = None) -> App:
    app = App(
        "otel",
        url,
        middleware=[middleware or TracingMiddleware(tracer_provider=traces.provider)],
        max_retries=1,
        retry_backoff=0.05,
    )
    apps.append(app)

    @app.task(store_result=True)
    async def headers() -> dict[str, str]:
        """The job's headers, and the span current in the task."""
        current = trace.get_current_span().get_span_context()
        return {**current_job().headers, "current": f"{current.span_id:016x}"}

    @app.task
    async def step_a() -> None:
        with traces.tracer.start_as_current_span("step a work"):
            await step_b.adelay()

    @app.task
    def sync_a() -> None:
        with traces.tracer.start_as_current_span("sync a work"):
            step_b.delay()

    @app.task
    async def step_b() -> None:
        with traces.tracer.start_as_current_span("step b work"):
            pass

    @app.task
    async def flaky() -> None:
        if current_job().attempt == 1:
            raise ValueError("first attempt fails")

    return app


@asynccontextmanager
async def worker(app: App) -> AsyncIterator[None]:
    """An in-process worker of ``app``, started after the connection the test enqueued on is
    closed (the worker's own close would leave that one open)."""
    await app.aclose()
    async with in_process_worker(app):
        yield


def _parent(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def _span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.span_id)


def _trace_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return int(span.context.trace_id)


async def test_a_job_joins_the_trace_it_was_enqueued_in(
    nats_server: NatsServer, traces: Traces, apps: list[App]
) -> None:
    app = _app(apps, nats_server.url, traces)
    with traces.tracer.start_as_current_span("POST /orders") as request:
        job = await app.tasks["headers"].adelay()
    async with worker(app):
        seen = await job.aresult(timeout=30)
    (producer,) = traces.of_task("send default", "headers")
    (consumer,) = await traces.wait("process default", "headers")

    # The producer span is a child of the request, and the consumer span of the producer span.
    context = request.get_span_context()
    assert producer.kind is SpanKind.PRODUCER and consumer.kind is SpanKind.CONSUMER
    assert _trace_id(producer) == _trace_id(consumer) == context.trace_id
    assert _parent(producer) == context.span_id
    assert _parent(consumer) == _span_id(producer)
    version, trace_id, span_id, flags = seen["traceparent"].split("-")
    assert (version, trace_id, span_id) == ("00", f"{context.trace_id:032x}", f"{_span_id(producer):016x}")
    assert int(flags, 16) & 1  # sampled
    # The consumer span is current while the task runs.
    assert seen["current"] == f"{_span_id(consumer):016x}"

    assert dict(producer.attributes or {}) == {
        "messaging.system": "nats",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "default",
        "messaging.message.id": job.id,
        "jsworker.task": "headers",
        "jsworker.kind": "job",
    }
    assert dict(consumer.attributes or {}) == {
        "messaging.system": "nats",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "default",
        "messaging.message.id": job.id,
        "jsworker.task": "headers",
        "jsworker.attempt": 1,
    }
    assert consumer.status.status_code is StatusCode.UNSET


async def test_a_delayed_job_is_traced_with_its_due_time(
    nats_server: NatsServer, traces: Traces, apps: list[App]
) -> None:
    app = _app(apps, nats_server.url, traces)
    job = await app.tasks["headers"].aapply(countdown=0.2)
    async with worker(app):
        seen = await job.aresult(timeout=30)
    (producer,) = traces.of_task("send default", "headers")
    (consumer,) = await traces.wait("process default", "headers")
    attributes = producer.attributes or {}
    assert attributes["jsworker.kind"] == "delayed"
    assert isinstance(attributes["jsworker.due"], float)
    assert _parent(producer) is None  # nothing was current: a trace of its own
    assert _parent(consumer) == _span_id(producer)
    assert seen["traceparent"].split("-")[2] == f"{_span_id(producer):016x}"


async def test_a_failed_run_is_an_error_and_each_attempt_has_its_span(
    nats_server: NatsServer, traces: Traces, apps: list[App]
) -> None:
    app = _app(apps, nats_server.url, traces)
    job = await app.tasks["flaky"].adelay()
    async with worker(app):
        runs = await traces.wait("process default", "flaky", count=2)
    (producer,) = traces.of_task("send default", "flaky")
    first, second = sorted(runs, key=lambda span: str((span.attributes or {})["jsworker.attempt"]))

    assert [(s.attributes or {})["jsworker.attempt"] for s in (first, second)] == [1, 2]
    assert all(_parent(span) == _span_id(producer) for span in runs)  # both runs join the job's trace
    assert all((span.attributes or {})["messaging.message.id"] == job.id for span in runs)

    assert first.status.status_code is StatusCode.ERROR
    assert first.status.description == "ValueError: first attempt fails"
    assert (first.attributes or {})["error.type"] == "ValueError"
    (event,) = first.events
    assert event.name == "exception"
    assert (event.attributes or {})["exception.type"] == "ValueError"
    assert (event.attributes or {})["exception.message"] == "first attempt fails"

    assert second.status.status_code is StatusCode.UNSET
    assert second.events == () and "error.type" not in (second.attributes or {})


@pytest.mark.parametrize("first", ["step_a", "sync_a"])
async def test_a_job_enqueued_by_a_running_task_is_in_its_trace(
    nats_server: NatsServer, traces: Traces, apps: list[App], first: str
) -> None:
    """Async tasks run in the consumer span's context; sync ones in a copy of it in their thread."""
    app = _app(apps, nats_server.url, traces)
    with traces.tracer.start_as_current_span("POST /orders") as request:
        await app.tasks[first].adelay()
    async with worker(app):
        (b_run,) = await traces.wait("process default", "step_b")
        (a_run,) = await traces.wait("process default", first)  # may end after B's run
    (a_send,) = traces.of_task("send default", first)
    (a_work,) = traces.named("step a work" if first == "step_a" else "sync a work")
    (b_send,) = traces.of_task("send default", "step_b")
    (b_work,) = traces.named("step b work")

    # request > send A > process A > A's own span > send B > process B > B's own span: one trace.
    chain = [a_send, a_run, a_work, b_send, b_run, b_work]
    assert {_trace_id(span) for span in chain} == {request.get_span_context().trace_id}
    assert _parent(a_send) == request.get_span_context().span_id
    for parent, child in pairwise(chain):
        assert _parent(child) == _span_id(parent), f"{child.name} is not a child of {parent.name}"


async def test_a_schedule_carries_no_trace_context(
    nats_server: NatsServer, traces: Traces, apps: list[App]
) -> None:
    app = _app(apps, nats_server.url, traces)
    with traces.tracer.start_as_current_span("deploy"):
        app.schedule(app.tasks["headers"], name="ticks", every=3600, headers={"X-Mine": "1"})
    assert app.schedules["ticks"].headers == {"X-Mine": "1"}
    assert [span.name for span in traces.spans()] == ["deploy"]


async def test_a_context_the_caller_gave_is_kept_and_linked(
    nats_server: NatsServer, traces: Traces, apps: list[App]
) -> None:
    app = _app(apps, nats_server.url, traces)
    given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with traces.tracer.start_as_current_span("POST /orders"):
        job = await app.tasks["headers"].aapply(headers={"traceparent": given})
    async with worker(app):
        seen = await job.aresult(timeout=30)
    assert seen["traceparent"] == given
    (producer,) = traces.of_task("send default", "headers")
    (link,) = producer.links
    assert (link.context.trace_id, link.context.span_id) == (
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
    )
    (consumer,) = await traces.wait("process default", "headers")
    assert _parent(consumer) == 0xB7AD6B7169203331


@pytest.mark.parametrize("provider", ["global", "no-op"])
async def test_without_a_configured_provider_nothing_is_added(
    nats_server: NatsServer, traces: Traces, apps: list[App], provider: str
) -> None:
    """OpenTelemetry's default (no SDK configured anywhere in this process) or an explicit
    no-op provider: no header, no span, even with a recording span current in the caller."""
    if provider == "global":
        # This test's premise: nothing in the test process configured OpenTelemetry.
        assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
        middleware = TracingMiddleware()
    else:
        middleware = TracingMiddleware(tracer_provider=trace.NoOpTracerProvider())
    app = _app(apps, nats_server.url, traces, middleware)
    with traces.tracer.start_as_current_span("POST /orders"):
        job = await app.tasks["headers"].aapply(headers={"X-Mine": "1"})
    async with worker(app):
        seen: dict[str, Any] = await job.aresult(timeout=30)
    own = {k: v for k, v in seen.items() if not k.startswith(("Nats-", "Jsw-", "Content-Type", "current"))}
    assert own == {"X-Mine": "1"}
    assert seen["current"] == "0000000000000000"  # no span in the task
    assert [span.name for span in traces.spans()] == ["POST /orders"]
