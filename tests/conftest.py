"""Shared test set-up. Server fixtures (nats_server, nats_cluster) come from jsworker.testing."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    """nats-py runs on asyncio only."""
    return "asyncio"
