"""An administrative session's connection (jsworker/jetstream/session.py), without a server."""

from __future__ import annotations

import asyncio

import pytest

from jsworker import App
from jsworker._errors import ConnectError
from jsworker.jetstream.connection import Connection, ConnectOptions
from jsworker.jetstream.session import OperatorSession

pytestmark = pytest.mark.anyio


async def test_callers_waiting_on_a_failed_attempt_share_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the server down, the callers that asked while one attempt was under way (the reads
    of one dashboard page) get its failure instead of each trying in turn; a later caller
    tries again."""
    attempts = 0
    opening = Connection.open

    async def counted(options: ConnectOptions) -> Connection:
        nonlocal attempts
        attempts += 1
        return await opening(options)

    monkeypatch.setattr(Connection, "open", counted)
    session: OperatorSession[App] = OperatorSession(
        App("unit", "nats://127.0.0.1:1", connect_timeout=0.3), "test"
    )
    results = await asyncio.gather(*(session.connection() for _ in range(4)), return_exceptions=True)
    assert all(isinstance(r, ConnectError) for r in results), results
    assert attempts == 1
    with pytest.raises(ConnectError):
        await session.connection()
    assert attempts == 2
