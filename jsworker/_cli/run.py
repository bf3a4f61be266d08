"""``jsworker run``: the worker process."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import click
import prometheus_client

from .._core.options import AppOptions
from .._fleet.reload import ReloadWatcher
from .._fleet.supervisor import Supervisor
from .._observability.logging import LEVELS, configure_logging
from .._runtime.settings import WorkerSettings
from .connection import connection_options
from .errors import EXIT_CRASH, EXIT_USAGE, command_errors, fail
from .options import options_from
from .worker_process import WorkerSpec, build_worker, child_main, loop_factory, naming_module, serve


class _Processes(click.ParamType[int]):
    name = "N|auto"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        if str(value).strip().lower() == "auto":
            return os.cpu_count() or 1
        try:
            count = int(value)
        except ValueError:
            self.fail(f"{value!r} is not a number of processes or 'auto'", param, ctx)
        if count < 1:
            self.fail("must be at least 1", param, ctx)
        return count


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
@click.option(
    "--processes",
    type=_Processes(),
    default="1",
    show_default=True,
    envvar="JSWORKER_PROCESSES",
    help="Worker processes on this machine, under one supervisor ('auto': one per CPU). 1 runs "
    "the worker in this process, with no supervisor [env: JSWORKER_PROCESSES].",
)
@click.option(
    "--max-jobs-per-process",
    type=click.IntRange(min=1),
    default=None,
    help="Replace a worker process after it started this many jobs (runs under a supervisor).",
)
@click.option(
    "--max-memory-per-process",
    type=click.IntRange(min=1),
    default=None,
    metavar="MB",
    help="Replace a worker process once it holds this many MiB of memory (runs under a supervisor).",
)
@click.option(
    "--reload",
    is_flag=True,
    help="Restart the worker(s) when a Python file under the app's directory changes (development; "
    "pip install 'jsworker[reload]').",
)
@connection_options
@click.option("--log-level", type=click.Choice(LEVELS), default="info", show_default=True)
@click.option("--log-format", type=click.Choice(["console", "json"]), default="console", show_default=True)
def run(
    app_spec: str,
    metrics_port: int | None,
    metrics_addr: str,
    loop_kind: str,
    processes: int,
    max_jobs_per_process: int | None,
    max_memory_per_process: int | None,
    reload: bool,
    log_level: str,
    log_format: str,
    **options: Any,
) -> None:
    """Run a worker for the App in MODULE (or MODULE:ATTR) until SIGTERM or Ctrl-C."""
    configure_logging(log_level, log_format)
    spec = WorkerSpec(
        app_spec, options, loop_kind, log_level, log_format, max_jobs_per_process, max_memory_per_process
    )
    if processes > 1 or max_jobs_per_process or max_memory_per_process or reload:
        _run_fleet(spec, processes, reload, metrics_port, metrics_addr)
        return
    with command_errors():
        worker = build_worker(spec)
    if metrics_port is not None:
        _serve_metrics(worker.app.metrics.registry, metrics_port, metrics_addr)
    try:
        factory = loop_factory(loop_kind)
    except ImportError:
        fail("--loop uvloop needs uvloop: pip install 'jsworker[uvloop]'", EXIT_USAGE)
    with (
        command_errors("worker crashed"),
        naming_module(app_spec),
        asyncio.Runner(loop_factory=factory) as runner,
    ):
        runner.run(serve(worker))


def _run_fleet(spec: WorkerSpec, processes: int, reload: bool, port: int | None, addr: str) -> None:
    # The supervisor never imports the app (its processes do): a broken app must not stop it
    # from reporting why, or, with --reload, from waiting for the fix.
    watcher: ReloadWatcher | None = None
    with command_errors():
        if reload:
            watcher = ReloadWatcher([app_directory(spec.app_spec)])
    registry = prometheus_client.CollectorRegistry()
    supervisor = Supervisor(
        child_main, spec, processes, grace=float(spec.options["grace"]), registry=registry, reload=watcher
    )
    if port is not None:
        _serve_metrics(registry, port, addr)
    code = supervisor.run()
    if supervisor.failure is not None:
        fail(supervisor.failure, EXIT_CRASH)
    raise SystemExit(code)


def app_directory(app_spec: str) -> Path:
    """The directory of the app's top-level package (or module), found without importing it."""
    top = app_spec.partition(":")[0].partition(".")[0]
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    found = importlib.util.find_spec(top) if top else None
    if found is None or found.origin is None:
        return Path(cwd)
    if found.submodule_search_locations:
        return Path(next(iter(found.submodule_search_locations)))
    return Path(found.origin).parent


def _serve_metrics(registry: prometheus_client.CollectorRegistry, port: int, addr: str) -> None:
    try:
        prometheus_client.start_http_server(port, addr, registry=registry)
    except OSError as exc:
        fail(f"cannot serve metrics on {addr}:{port}: {exc.strerror or exc}", EXIT_USAGE)
