"""Declaring process tasks (``executor="process"``): what a fresh process could not find by
name is refused when it is declared, and what it would find wrongly when a worker starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jsworker import App, ConfigurationError
from jsworker._runtime.execution import Executor

app = App("procunit", "nats://127.0.0.1:1")


@app.task(executor="process")
def crunch(n: int) -> int:
    """A process task as it should be declared."""
    return n * n


def bare(n: int) -> int:
    """A module-level function, declared in the tests below without its name holding the task."""
    return n


async def fetch() -> None:
    """A module-level async function."""


def test_a_module_level_task_is_a_process_task_a_worker_finds() -> None:
    assert crunch.in_process and crunch.options.executor == "process"
    Executor(app, threads=1).close()


def test_a_function_defined_in_a_function_is_refused() -> None:
    other = App("procunit", "nats://127.0.0.1:1")
    with pytest.raises(ConfigurationError, match="defined at the top level of a module"):

        @other.task(executor="process")
        def inner() -> None: ...


def test_a_lambda_is_refused() -> None:
    other = App("procunit", "nats://127.0.0.1:1")
    with pytest.raises(ConfigurationError, match="defined at the top level of a module"):
        other.task(executor="process", name="anon")(lambda: None)


def test_an_async_function_is_refused() -> None:
    other = App("procunit", "nats://127.0.0.1:1")
    with pytest.raises(ConfigurationError, match=r"is for sync \(def\) functions"):
        other.task(executor="process")(fetch)


def test_a_task_of_a_script_run_directly_is_refused(tmp_path: Path) -> None:
    """A script's functions live in __main__, which a fresh process cannot import."""
    script = tmp_path / "script.py"
    script.write_text(
        "from jsworker import App\n"
        "app = App('script')\n"
        "@app.task(executor='process')\n"
        "def work() -> None: ...\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "ConfigurationError: task work: executor='process' needs a function of an importable module" in (
        done.stderr
    )


def test_an_unknown_executor_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="executor must be 'thread' or 'process', not 'fork'"):
        App("procunit", "nats://127.0.0.1:1").task(executor="fork")(bare)  # type: ignore[call-overload]
    with pytest.raises(ConfigurationError, match="executor must be"):
        App("procunit", "nats://127.0.0.1:1", executor="fork")  # type: ignore[arg-type]


def test_the_apps_default_executor_is_for_its_sync_tasks() -> None:
    """App(executor="process"): sync tasks run in processes, async ones stay on the loop."""
    other = App("procunit", "nats://127.0.0.1:1", executor="process")
    assert other.task(fetch).options.executor == "thread"
    assert other.task(bare).in_process
    assert not other.task(executor="thread", name="bare_thread")(bare).in_process


def test_a_worker_refuses_a_task_its_processes_would_not_find() -> None:
    """Declared without the decorator, the function's name holds the function: a task process
    would look the task up there, so the worker does not start."""
    other = App("procunit", "nats://127.0.0.1:1")
    other.task(executor="process")(bare)
    with pytest.raises(ConfigurationError, match=r"test_process_tasks\.bare is function .*, not the task"):
        Executor(other, threads=1)


def test_a_pool_has_at_least_one_process() -> None:
    with pytest.raises(ValueError, match="processes must be >= 1"):
        Executor(app, threads=1, processes=0)
