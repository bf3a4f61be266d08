"""Running a driver's enqueues and reads on a benchmark app's own connection."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from jsworker import App


async def using(app: App, url: str, body: Callable[[], Awaitable[Any]]) -> Any:
    """``body()`` with ``app``'s producer on ``url``, its connection closed afterwards."""
    app.servers = [url]
    try:
        return await body()
    finally:
        await app.aclose()
