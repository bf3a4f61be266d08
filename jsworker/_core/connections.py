"""An app's connections for enqueues and job reads: one per event loop.

Async callers share their event loop's connection (a worker's tasks share the worker's own,
bound with :meth:`ConnectionPool.bind`); sync callers reach the one on the sync bridge's loop
(:mod:`jsworker._core.bridge`).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable

from .._errors import ConnectError, EnqueueError
from ..jetstream.connection import Connection, ConnectOptions

# A forked child's copies of its parent's connections (see ConnectionPool.forget).
_inherited: list[Connection] = []


class ConnectionPool:
    """One connection per event loop, opened on first use with the options ``options()``
    gives then. After :meth:`renew` (the app's servers or credentials changed) each
    connection the pool opened is replaced on its next use: a test that points the app at
    its own server reaches that server, not the one before.

    Keyed weakly by loop: a loop that is gone takes its entry with it."""

    def __init__(self, options: Callable[[], ConnectOptions]) -> None:
        self._options = options
        self._conns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Connection] = (
            weakref.WeakKeyDictionary()
        )
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        # The connections this pool opened itself (not those workers bound).
        self._opened: weakref.WeakSet[Connection] = weakref.WeakSet()
        # Opened with options that changed since: replaced on their next use.
        self._stale: weakref.WeakSet[Connection] = weakref.WeakSet()

    def renew(self) -> None:
        """The options changed: each connection this pool opened is replaced on next use."""
        self._stale.update(self._opened)

    async def bind(self, conn: Connection) -> None:
        """Use ``conn`` on its event loop (a worker shares its own with its tasks' enqueues);
        a connection this pool opened for that loop is closed (another worker's, bound
        before, is that worker's to close)."""
        old = self._conns.get(conn.loop)
        self._conns[conn.loop] = conn
        if old is not None and old is not conn and old in self._opened and not old.is_closed:
            # Nothing reaches it any more: left open, it would only leak its socket.
            await old.close()

    async def connection(self) -> Connection:
        """This event loop's connection, opened on first use; :class:`~jsworker.EnqueueError`
        when it cannot be (enqueues are what it is for first, and their callers catch that)."""
        loop = asyncio.get_running_loop()
        conn = self._conns.get(loop)
        if conn is not None and not conn.is_closed and (not self._stale or conn not in self._stale):
            return conn
        lock = self._locks.setdefault(loop, asyncio.Lock())
        async with lock:
            conn = self._conns.get(loop)
            if conn is not None and conn in self._stale:
                self._stale.discard(conn)
                await conn.close()
            if conn is None or conn.is_closed:
                try:
                    conn = await Connection.open(self._options())
                except ConnectError as exc:
                    raise EnqueueError(f"cannot enqueue: {exc}") from exc
                # Callers rarely close the app's connection: it closes with its loop.
                conn.close_with_loop()
                self._conns[loop] = conn
                self._opened.add(conn)
        return conn

    async def aclose(self) -> None:
        """Close this event loop's connection (if this pool opened or was given one)."""
        conn = self._conns.pop(asyncio.get_running_loop(), None)
        if conn is not None:
            await conn.close()

    def forget(self) -> None:
        """Drop every connection without closing it: in a forked child they are the parent's
        (their sockets too), and closing them would hit the parent's."""
        # Kept referenced until the child exits: collected, the tasks they left pending on the
        # parent's loop (which never runs here) would each be reported destroyed.
        _inherited.extend(self._opened)
        self._conns = weakref.WeakKeyDictionary()
        self._locks = weakref.WeakKeyDictionary()
        self._opened = weakref.WeakSet()
        self._stale = weakref.WeakSet()
