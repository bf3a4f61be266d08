"""One worker process, run alone by ``jsworker run`` or as one process of a fleet.

A process of a fleet is started by the supervisor with a :class:`WorkerSpec` (the flags
``jsworker run`` was given) and a pipe back to it: it says when it is ready or why it could
not start, sends its metrics about once a second and once more at exit, retires itself when it
reaches ``max_jobs`` jobs or ``max_memory_mb`` of memory, says when its worker has ended (the
process may then only exit), and stops when the supervisor is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import click
import prometheus_client
import structlog

from .._app import App
from .._core.options import AppOptions
from .._errors import ProvisioningNeeded
from .._fleet.channel import ChildChannel, Kind
from .._observability.logging import configure_logging, get_logger
from .._runtime.recycling import resident_mib
from .._runtime.settings import WorkerSettings
from .._runtime.worker import Worker
from ..jetstream.connection import redact_urls
from .connection import apply_connection_options
from .errors import exit_code
from .loader import load_app
from .options import flag_fields

log = get_logger("jsworker.fleet")

# How often a fleet's process reports its metrics, and checks its memory (a cheap read, often
# enough that a leaking job overshoots the limit by little).
_REPORT_EVERY = 1.0
_MEMORY_EVERY = 0.25
#: Net allocations between two collections of the youngest generation in a running worker.
YOUNG_GENERATION = 10_000


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker process is started with: ``jsworker run``'s flags.

    Handed to each process of a fleet as it starts (with the spawn start method), so every
    value is a plain one; credentials travel this way rather than on a command line.
    """

    app_spec: str
    options: dict[str, Any] = field(default_factory=dict)
    loop_kind: str = "auto"
    log_level: str = "info"
    log_format: str = "console"
    max_jobs: int | None = None
    max_memory_mb: int | None = None


def build_worker(spec: WorkerSpec) -> Worker:
    """The worker ``spec`` describes; raises what loading the app or a bad flag raises."""
    options = dict(spec.options)
    app: App = load_app(spec.app_spec)
    apply_connection_options(app, options)
    app.configure_options(**{f.name: options.pop(f.name) for f in flag_fields(AppOptions)})
    settings = WorkerSettings(**{f.name: options.pop(f.name) for f in flag_fields(WorkerSettings)})
    return Worker(app, settings, job_budget=spec.max_jobs)


@contextlib.contextmanager
def naming_module(app_spec: str) -> Iterator[None]:
    """Re-raise a :class:`ProvisioningNeeded` escaping the block with the command that fixes it
    naming ``app_spec``, the app's module as the worker was given it."""
    try:
        yield
    except ProvisioningNeeded as exc:
        raise exc.of_module(app_spec) from exc


def loop_factory(kind: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop factory for ``--loop`` (None: asyncio's default); ImportError when
    uvloop is asked for and missing."""
    if kind == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if kind == "uvloop":
            raise
        return None
    return uvloop.new_event_loop


async def serve(
    worker: Worker, channel: ChildChannel | None = None, max_memory_mb: int | None = None
) -> None:
    """Run ``worker`` until SIGTERM or SIGINT (a second one: at once), reporting to
    ``channel`` when it is one process of a fleet."""
    loop = asyncio.get_running_loop()
    signals_seen = 0

    def on_signal() -> None:
        nonlocal signals_seen
        signals_seen += 1
        # A second signal means "now": skip the rest of the grace period.
        worker.stop(now=signals_seen > 1)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    side = [asyncio.create_task(_freeze_when_started(worker))]
    if channel is not None:
        side.append(asyncio.create_task(_report(worker, channel, max_memory_mb)))
    code: int | None = None  # the process's exit code, once the worker has ended
    try:
        await worker.run()
        code = 0
    except Exception as exc:
        code = exit_code(exc)
        raise
    finally:
        for task in side:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if channel is not None:
            _send_metrics(worker, channel)
            if worker.retired is not None:
                channel.send(Kind.RECYCLING, worker.retired)
            if code is not None:
                # Its jobs are settled or handed back: the supervisor gives the rest of the
                # exit (the event loop's and the interpreter's) a few seconds.
                channel.send(Kind.EXITING, str(code))


async def _freeze_when_started(worker: Worker) -> None:
    await worker.started.wait()
    # What exists once the worker runs (modules, the app, connections, metrics) lives as long
    # as the process: out of the collector's sight, its collections walk only what jobs made.
    # Jobs whose records wait for the server outlive the youngest generation, and walking the
    # whole heap for them cost a worker keeping results per job (bench/README.md, "Hot-path
    # choices").
    gc.freeze()
    # A busy worker holds up to a thousand prefetched deliveries and their headers, which
    # outlive the youngest generation: at the default threshold (700) the collector walked
    # them every few hundred jobs and freed nothing (0.4 µs of a no-op job). Cycles a task
    # makes are still collected, a few megabytes later at most.
    gc.set_threshold(YOUNG_GENERATION, *gc.get_threshold()[1:])


async def _report(worker: Worker, channel: ChildChannel, max_memory_mb: int | None) -> None:
    await worker.started.wait()
    channel.send(Kind.READY)
    reported = 0.0
    loop = asyncio.get_running_loop()
    while True:
        if loop.time() - reported >= _REPORT_EVERY:
            reported = loop.time()
            # The pipe write may block for a moment when the supervisor is busy: off the loop.
            await asyncio.to_thread(_send_metrics, worker, channel)
            if channel.orphaned:
                log.warning("worker.supervisor_gone")
                worker.stop()
        if max_memory_mb is not None and (resident_mib() or 0.0) >= max_memory_mb:
            worker.retire("memory")
        await asyncio.sleep(_MEMORY_EVERY if max_memory_mb is not None else _REPORT_EVERY)


def _send_metrics(worker: Worker, channel: ChildChannel) -> None:
    # A periodic send cancelled at exit goes on in its thread: the final one waits for it.
    channel.send_snapshot(lambda: prometheus_client.generate_latest(worker.app.metrics.registry).decode())


def child_main(spec: WorkerSpec, index: int, conn: Connection) -> None:
    """Entry point of one process of a fleet (``index`` counts from 0)."""
    # A process group of its own: a Ctrl-C in the terminal reaches the supervisor only, which
    # then stops its processes once (a second signal would mean "now" to them).
    os.setpgid(0, 0)
    configure_logging(spec.log_level, spec.log_format)
    structlog.contextvars.bind_contextvars(process=index)
    channel = ChildChannel(conn)
    try:
        worker = build_worker(spec)
        factory = loop_factory(spec.loop_kind)
    except Exception as exc:
        reason = redact_urls(str(exc))
        if isinstance(exc, ImportError) and spec.loop_kind == "uvloop":
            reason = "--loop uvloop needs uvloop: pip install 'jsworker[uvloop]'"
        channel.send(Kind.FAILED, reason)
        click.echo(f"error: {reason}", err=True)
        sys.exit(exit_code(exc))
    try:
        with naming_module(spec.app_spec), asyncio.Runner(loop_factory=factory) as runner:
            runner.run(serve(worker, channel, spec.max_memory_mb))
    except Exception as exc:
        reason = redact_urls(f"{type(exc).__name__}: {exc}")
        if not worker.started.is_set():
            channel.send(Kind.FAILED, reason)
        log.error("worker.crashed", error=reason)
        sys.exit(exit_code(exc))
