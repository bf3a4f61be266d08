"""Fault tests: real nats-server processes (fixtures ``nats_server`` / ``nats_cluster`` from
jsworker.testing) and real ``jsworker run`` processes, killed, restarted and fed hostile input.

Run with ``-s`` to see each test's one-line JSON summary.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from .harness import Records, Workers, app_module


def pytest_configure(config: pytest.Config) -> None:
    # pyproject.toml belongs to everyone; the marker is registered here so that
    # `pytest -m faults` / `-m "not faults"` select this suite without touching it.
    config.addinivalue_line(
        "markers", "faults: fault injection with real servers and workers (kill -9, restarts, hostile input)"
    )


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    """Worker processes of this test; each still running at the end is stopped by its pid."""
    started = Workers(tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


@pytest.fixture
def records(workers: Workers) -> Records:
    """The executions the workers of this test recorded."""
    return Records(workers.record)


@pytest.fixture
def fault_app() -> Iterator[ModuleType]:
    """The fault app module, as producers in this process use it; its settings are restored after."""
    yield from app_module("fault_app")
