"""``jsworker run``: the worker process."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import Any

import click
import prometheus_client

from ..app_options import AppOptions
from ..observability.logging import LEVELS, configure_logging
from ..runtime.worker import Worker, WorkerSettings
from .connection import connection_options, load_connected_app
from .errors import EXIT_USAGE, command_errors, fail
from .options import flag_fields, options_from


@click.command()
@click.argument("app_spec", metavar="MODULE[:ATTR]")
@options_from(WorkerSettings)
@options_from(AppOptions, defaults=False)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    envvar="JSWORKER_METRICS_PORT",
    default=None,
    help="Serve Prometheus metrics on this port (off by default) [env: JSWORKER_METRICS_PORT].",
)
@click.option(
    "--metrics-addr",
    default="0.0.0.0",
    show_default=True,
    help=(
        "Address the metrics server binds: all interfaces by default, as exporters do. The "
        "endpoint shows queue and task names and job counts, never job ids or arguments; "
        "use 127.0.0.1 or a network policy to keep it private."
    ),
)
@click.option(
    "--loop",
    "loop_kind",
    type=click.Choice(["auto", "asyncio", "uvloop"]),
    default="auto",
    show_default=True,
    help="Event loop: uvloop (pip install 'jsworker[uvloop]') is faster; auto uses it when installed.",
)
@connection_options
@click.option("--log-level", type=click.Choice(LEVELS), default="info", show_default=True)
@click.option("--log-format", type=click.Choice(["console", "json"]), default="console", show_default=True)
def run(
    app_spec: str,
    metrics_port: int | None,
    metrics_addr: str,
    loop_kind: str,
    log_level: str,
    log_format: str,
    **options: Any,
) -> None:
    """Run a worker for the App in MODULE (or MODULE:ATTR) until SIGTERM or Ctrl-C."""
    configure_logging(log_level, log_format)
    app = load_connected_app(app_spec, options)
    with command_errors():
        app.configure_options(**{f.name: options.pop(f.name) for f in flag_fields(AppOptions)})
    settings = WorkerSettings(**{f.name: options.pop(f.name) for f in flag_fields(WorkerSettings)})
    if metrics_port is not None:
        try:
            prometheus_client.start_http_server(metrics_port, metrics_addr, registry=app.metrics.registry)
        except OSError as exc:
            fail(f"cannot serve metrics on {metrics_addr}:{metrics_port}: {exc.strerror or exc}", EXIT_USAGE)
    worker = Worker(app, settings)
    try:
        factory = loop_factory(loop_kind)
    except ImportError:
        fail("--loop uvloop needs uvloop: pip install 'jsworker[uvloop]'", EXIT_USAGE)
    with command_errors("worker crashed"), asyncio.Runner(loop_factory=factory) as runner:
        runner.run(_serve(worker))


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


async def _serve(worker: Worker) -> None:
    loop = asyncio.get_running_loop()
    signals_seen = 0

    def on_signal() -> None:
        nonlocal signals_seen
        signals_seen += 1
        # A second signal means "now": skip the rest of the grace period.
        worker.stop(now=signals_seen > 1)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    await worker.run()
