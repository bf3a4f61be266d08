"""Shared test set-up. Server fixtures (nats_server, nats_cluster) come from jsworker.testing.

The README's test command runs the suite in parallel test processes (pytest-xdist). Most tests
wait on servers and worker processes rather than compute, so more processes than cores pay.
Two things are decided here for every suite:

* ``slow``: the fault, ops, Spark and benchmark suites, and the integration tests marked so one
  by one (each takes seconds), are left out by ``pytest -m "not slow"``, the quick tier for the
  edit-test loop.
* :data:`RUN_TOGETHER`: modules whose tests share something costly that a module- or
  session-scoped fixture starts once go to one test process as one unit, so it starts once in a
  parallel run, not once in every process that gets one of their tests.
"""

from __future__ import annotations

import compileall
import fnmatch
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from xdist.scheduler import LoadScopeScheduling

TESTS = Path(__file__).parent

#: Suites whose every test is slow: real worker fleets killed and restarted, whole
#: deployments, a JVM, benchmarks.
SLOW_SUITES = ("faults", "ops", "spark", "bench")

#: Node id prefixes (paths relative to the repository) of what runs as one unit in a parallel
#: run: the Spark suite shares one SparkSession (a JVM); the others share a module-scoped
#: fixture (a whole deployment, a real Prometheus, a worker process pool, a server with an event
#: history, a browser, a three-node cluster). tests/unit/test_test_layout.py checks that every
#: module with such a fixture is here.
RUN_TOGETHER = (
    "tests/spark/",
    "tests/ops/test_deployment.py",
    "tests/ops/test_prometheus.py",
    "tests/integration/test_events_export.py",
    "tests/integration/test_process_executor.py",
    "tests/integration/test_replicated.py",
    "tests/integration/test_ui_browser.py",
)


def pytest_configure(config: pytest.Config) -> None:
    """Write the bytecode of this checkout's code once, before any test starts (in the
    controller of a parallel run, not in each of its processes).

    The suite starts hundreds of Python processes (workers, examples, Spark's Python workers)
    that import jsworker and the test apps. Where PYTHONDONTWRITEBYTECODE is set, as on many CI
    machines, none of them writes what it compiles, so each compiled all of it from source
    again: on a 2-core machine that was a large share of the suite's time, and it made Spark's
    Python workers miss the 10 s Spark gives them to connect back. ``compileall`` writes
    bytecode whatever that variable says, and only for files changed since.
    """
    if hasattr(config, "workerinput"):
        return  # an xdist worker: its controller compiled before starting it
    for tree in ("jsworker", "tests", "examples"):
        compileall.compile_dir(TESTS.parent / tree, quiet=1)
    rewrite_test_modules(config, TESTS)


def rewrite_test_modules(config: pytest.Config, root: Path) -> None:
    """Write pytest's assertion-rewritten bytecode of the test modules under ``root`` once,
    before the test processes start.

    Every test process rewrites the asserts of each test module it imports, and keeps the
    result only where bytecode may be written: under PYTHONDONTWRITEBYTECODE each of the 8
    processes rewrote all 200 modules again, about 4 s of CPU each, at the start of every run
    (clean clone or not). pytest reads a rewritten module it finds whatever that variable says,
    so the modules rewritten here once are read by all. This uses pytest's own rewriting
    functions, which are not public: if a pytest release moves them, nothing is written here
    and each process rewrites as before (and tests/unit/test_suite_layout.py, which uses them
    too, says so).
    """
    if not sys.dont_write_bytecode or config.getoption("assertmode") != "rewrite":
        return  # nothing to do: each process writes what it rewrites, or nothing is rewritten
    try:
        from _pytest.assertion.rewrite import (
            PYC_TAIL,
            _read_pyc,
            _rewrite_test,
            _write_pyc,
            assertstate_key,
            get_cache_dir,
        )
    except ImportError:
        return
    state = config.stash[assertstate_key]
    patterns = [*config.getini("python_files"), "conftest.py"]
    for module in sorted(root.rglob("*.py")):
        if not any(fnmatch.fnmatch(module.name, pattern) for pattern in patterns):
            continue
        cache = get_cache_dir(module)
        pyc = cache / (module.name[:-3] + PYC_TAIL)
        if _read_pyc(module, pyc) is not None:
            continue  # rewritten by an earlier run, and the module has not changed since
        cache.mkdir(exist_ok=True)
        source_hash, code = _rewrite_test(module, config)
        _write_pyc(state, code, source_hash, pyc)


@pytest.fixture
def anyio_backend() -> str:
    """nats-py runs on asyncio only."""
    return "asyncio"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        suite = Path(str(item.path)).relative_to(TESTS).parts[0]
        if suite in SLOW_SUITES:
            item.add_marker(pytest.mark.slow)


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to in a parallel run: its :data:`RUN_TOGETHER` prefix,
    or the test alone."""
    return next((prefix for prefix in RUN_TOGETHER if nodeid.startswith(prefix)), nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadScopeScheduling | None:
    """The default distribution (``--dist load``, test by test) with :data:`RUN_TOGETHER` kept
    together. Units are handed out largest first, so the long shared modules start at once
    instead of ending the run alone."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    # xdist ships no type information: its scheduler is Any to the type checker.
    class Together(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return Together(config, log)
