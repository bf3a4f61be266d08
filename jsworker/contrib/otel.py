"""OpenTelemetry tracing as a middleware: ``pip install 'jsworker[otel]'``.

``App(middleware=[TracingMiddleware()])`` gives each enqueue a PRODUCER span ``send <queue>``,
child of whatever span is current where the job is enqueued (a web request's), whose context
rides in the job's headers (W3C ``traceparent`` with the default propagator); and each run of
the job in a worker a CONSUMER span ``process <queue>``, child of that producer span and
current while the task runs, so the task's own spans and the jobs it enqueues nest under it.
A chain of jobs is one trace.

Attribute names follow the messaging semantic conventions of OpenTelemetry as of semantic
conventions 1.44 (``messaging.*``, still experimental there, and the stable ``error.type``);
the conventions name no attempt counter for a system like this one, so the attempt is
``jsworker.attempt``. The names are written out here rather than imported from
``opentelemetry-semantic-conventions``, which keeps the messaging ones in a private module.

With no tracer provider configured (OpenTelemetry's default, a no-op), both hooks return
after a clock read: no span, no header, nothing extracted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

try:
    from opentelemetry import propagate, trace
    from opentelemetry.propagators.textmap import TextMapPropagator
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode, Tracer, TracerProvider
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "jsworker.contrib.otel needs the OpenTelemetry API: pip install 'jsworker[otel]'"
    ) from exc

from .._core.middleware import Middleware, OutgoingJob
from .._current import JobContext
from .._version import __version__

__all__ = ["TracingMiddleware"]

#: Seconds between two looks for a configured provider while there is none.
LOOK_EVERY = 1.0
#: The semantic conventions the attribute names below follow.
SCHEMA_URL = "https://opentelemetry.io/schemas/1.44.0"

MESSAGING_SYSTEM = "messaging.system"
MESSAGING_OPERATION_TYPE = "messaging.operation.type"
MESSAGING_OPERATION_NAME = "messaging.operation.name"
MESSAGING_DESTINATION_NAME = "messaging.destination.name"
MESSAGING_MESSAGE_ID = "messaging.message.id"
ERROR_TYPE = "error.type"
JSWORKER_TASK = "jsworker.task"
JSWORKER_ATTEMPT = "jsworker.attempt"
JSWORKER_KIND = "jsworker.kind"
JSWORKER_DUE = "jsworker.due"
JSWORKER_CANCELLED = "jsworker.cancelled"

# The providers that make only non-recording spans: OpenTelemetry's default until an SDK is
# configured (the proxy hands out no-op tracers until then), and the explicit no-op one.
_NO_OP_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


class TracingMiddleware(Middleware):
    """Traces enqueues and runs of jobs with OpenTelemetry (see the module's documentation).

    ``tracer_provider`` and ``propagator`` default to OpenTelemetry's global ones. Until a
    provider that records is configured, the middleware looks for one at most once a second
    (:data:`LOOK_EVERY`): configure it before the first job (at start-up, or in a worker's
    start hook) and every job is traced.

    Periodic schedules get no producer span and no trace context: the headers of a schedule
    ride with every tick it fires, which would put every run into the one trace that declared
    it; each tick's run starts a trace of its own instead.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        propagator: TextMapPropagator | None = None,
    ) -> None:
        self._provider = tracer_provider
        self._propagator = propagator
        # The tracer once a provider that records is known (then for good: OpenTelemetry sets
        # its global provider once only), and when to look for one again until then.
        self._tracer: Tracer | None = None
        self._next_look = 0.0

    def _active_tracer(self) -> Tracer | None:
        """The tracer to use, or None while the provider is a no-op one."""
        tracer = self._tracer
        if tracer is not None:
            return tracer
        # Asking OpenTelemetry for its global provider costs microseconds while none is set
        # (it looks up an environment variable each time): at most once a second here, which
        # keeps an app without tracing at a clock read per job.
        now = time.monotonic()
        if now < self._next_look:
            return None
        self._next_look = now + LOOK_EVERY
        provider = self._provider or trace.get_tracer_provider()
        if not isinstance(provider, _NO_OP_PROVIDERS):
            tracer = provider.get_tracer(__name__, __version__, schema_url=SCHEMA_URL)
            # An SDK switched off (OTEL_SDK_DISABLED) hands out no-op tracers.
            if not isinstance(tracer, trace.NoOpTracer):
                self._tracer = tracer
        return self._tracer

    def _textmap(self) -> TextMapPropagator:
        return self._propagator or propagate.get_global_textmap()

    def on_enqueue(self, job: OutgoingJob) -> None:
        """Record a PRODUCER span for the enqueue and put its context in the job's headers.

        The span starts and ends here, before the job is sent: the hook runs before the
        publish and nothing runs after it, so the span marks the enqueue, not the server's
        answer. A context the caller put in the headers already is kept, and linked to.
        """
        if job.kind == "schedule":
            return
        tracer = self._active_tracer()
        if tracer is None:
            return
        propagator = self._textmap()
        headers = job.headers
        given = None
        if headers and not propagator.fields.isdisjoint(headers):
            # The caller's own creation context: the conventions say keep it as it is.
            given = trace.get_current_span(propagator.extract(headers)).get_span_context()
        attributes: dict[str, Any] = {
            MESSAGING_SYSTEM: "nats",
            MESSAGING_OPERATION_TYPE: "send",
            MESSAGING_OPERATION_NAME: "send",
            MESSAGING_DESTINATION_NAME: job.queue,
            MESSAGING_MESSAGE_ID: job.id,
            JSWORKER_TASK: job.task,
            JSWORKER_KIND: job.kind,
        }
        if job.due is not None:
            attributes[JSWORKER_DUE] = job.due
        span = tracer.start_span(
            f"send {job.queue}",
            kind=SpanKind.PRODUCER,
            attributes=attributes,
            links=[Link(given)] if given is not None and given.is_valid else None,
        )
        try:
            if given is None:
                # Injected even when the span is not sampled: the not-sampled flag then
                # travels with the job and the worker's parent-based sampler drops its run
                # too, rather than sampling it as a trace of its own.
                propagator.inject(headers, context=trace.set_span_in_context(span))
        finally:
            span.end()

    async def around_run(self, job: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        """Run the job inside a CONSUMER span, child of the context its headers carry.

        What the task raises is recorded on the span, which then has an ERROR status (a
        :class:`~jsworker.Retry` too: that attempt did not succeed); a run cancelled (on
        request, or by a worker stopping) is marked ``jsworker.cancelled`` and is no error.
        """
        tracer = self._active_tracer()
        if tracer is None:
            return await call_next()
        parent = self._textmap().extract(job.headers)
        attributes: dict[str, Any] = {
            MESSAGING_SYSTEM: "nats",
            MESSAGING_OPERATION_TYPE: "process",
            MESSAGING_OPERATION_NAME: "process",
            MESSAGING_DESTINATION_NAME: job.queue,
            MESSAGING_MESSAGE_ID: job.id,
            JSWORKER_TASK: job.task,
            JSWORKER_ATTEMPT: job.attempt,
        }
        # Current for the whole call: an async task runs in this coroutine's context, and a
        # sync one in a copy of it taken when its thread is handed the call.
        with tracer.start_as_current_span(
            f"process {job.queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                return await call_next()
            except asyncio.CancelledError:
                span.set_attribute(JSWORKER_CANCELLED, True)
                raise
            except BaseException as exc:
                span.record_exception(exc)
                kind = _error_type(exc)
                span.set_attribute(ERROR_TYPE, kind)
                span.set_status(Status(StatusCode.ERROR, f"{kind}: {exc}"))
                raise


def _error_type(exc: BaseException) -> str:
    """The exception's class as ``error.type`` wants it, named as the SDK names it in the
    exception event (``module.Class``, a builtin's bare name)."""
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
