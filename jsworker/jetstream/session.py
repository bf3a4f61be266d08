"""A connection an administrative object opens on first use and closes with itself."""

from __future__ import annotations

import asyncio
import time
from types import TracebackType
from typing import Any, Generic, Literal, Protocol, Self

from typing_extensions import TypeVar

from .._errors import ConnectError
from .connection import Connection, ConnectOptions

#: The roles a session connects as: an ``operator``, or a ``dashboard`` (an operator's reads
#: and only the actions a dashboard offers; see :mod:`jsworker._core.permissions`).
SessionRole = Literal["operator", "dashboard"]


class OperatorApp(Protocol):
    """What a session needs of its app: how it connects as an operator (any app does)."""

    def connect_options(self, role: SessionRole, purpose: str | None = None) -> ConnectOptions:
        """The options of a connection in ``role`` named after ``purpose``."""
        ...


# The app type a subclass keeps in ``self.app``: what its own methods read of the app. A
# subclass that names none gets Any (this layer knows no app type to default to).
AppT = TypeVar("AppT", bound=OperatorApp, default=Any)


class OperatorSession(Generic[AppT]):
    """Opens an ``operator`` connection of ``app`` on first use (or one of ``role``), on the
    event loop it is used from; close it with :meth:`aclose` or use the object as
    ``async with``."""

    def __init__(self, app: AppT, purpose: str, role: SessionRole = "operator") -> None:
        self.app = app
        self.role: SessionRole = role
        self._purpose = purpose
        self._conn: Connection | None = None
        self._lock = asyncio.Lock()
        # The last attempt that failed: when it ended, and why.
        self._failed: tuple[float, ConnectError] | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection (it is opened again on next use)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def connection(self) -> Connection:
        """The session's connection, opened on first use (ConnectError when it cannot be).

        Callers that asked while an attempt was under way share its outcome: with the server
        down, the reads of one dashboard page wait for one attempt, not one after another.
        """
        asked = time.monotonic()
        async with self._lock:
            if self._conn is None or self._conn.is_closed:
                if self._failed is not None and self._failed[0] >= asked:
                    raise self._failed[1].with_traceback(None)
                try:
                    self._conn = await Connection.open(self.app.connect_options(self.role, self._purpose))
                except ConnectError as exc:
                    self._failed = (time.monotonic(), exc)
                    raise
                self._failed = None
            return self._conn
