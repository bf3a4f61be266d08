"""Fixtures of the integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from jsworker._core.permissions import server_config
from jsworker._observability.logging import configure_logging
from jsworker._wire.names import ROLES
from jsworker.testing import NatsServer

from .secured import PASSWORD, server_with


@pytest.fixture
def secured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NatsServer]:
    """A server whose users are the printed ones (passwords from the environment, as the
    block expects) plus ``admin`` (see :mod:`.secured`)."""
    for app in ("perm", "other"):
        for role in ROLES:
            monkeypatch.setenv(f"{app.upper()}_{role.upper()}_PASSWORD", PASSWORD.format(f"{app}-{role}"))
    # App perm's queues may have two partitions: a second job stream, granted alike.
    server = server_with(tmp_path, server_config(["perm", "other"], partitions=2))
    yield server
    server.stop()


@pytest.fixture
def info_logging() -> Iterator[None]:
    """Info lines logged for the test, whatever level an earlier test in this process
    configured (a logger configured at "warning" drops them before any capture sees them)."""
    saved = structlog.get_config()
    configure_logging("info")
    yield
    structlog.configure(**saved)
