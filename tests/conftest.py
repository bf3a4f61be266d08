"""Shared test set-up. Server fixtures (nats_server, nats_cluster) come from jsworker.testing."""

from __future__ import annotations

import gc
from collections.abc import Generator

import pytest


@pytest.fixture
def anyio_backend() -> str:
    """nats-py runs on asyncio only."""
    return "asyncio"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, object, object]:
    # A coroutine nats-py leaves suspended on a closed event loop raises when it is collected.
    # Collected while pytest parses a source file to show a failure, CPython 3.11's traceback
    # code re-enters the parser and pytest stops with "AST constructor recursion depth
    # mismatch". Collected here, before the report is made, it cannot interrupt that.
    if call.excinfo is not None:
        gc.collect()
    return (yield)
