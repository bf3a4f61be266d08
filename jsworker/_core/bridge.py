"""Sync code's way into async code: a background thread with its own event loop.

Started on first use; a forked child notices it is not the parent and starts its own. A
process that exits without closing the app closes the bridges it started on its way out, as
:meth:`SyncBridge.close` does: their connections drained and closed, their loops ended.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
import warnings
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


class SyncBridge:
    """Runs coroutines for sync callers on one background event loop, shared by all of them.

    ``on_fork`` runs when a forked child first uses the bridge, before its new loop starts:
    what lived on the parent's loop (its connections) must be forgotten there too. ``on_exit``
    runs on the loop when the process exits with the bridge open (it closes what lives there).
    """

    def __init__(
        self,
        on_fork: Callable[[], None] | None = None,
        on_exit: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._on_fork = on_fork
        #: What closes what lives on the loop, run there when the process exits with it open.
        self.on_exit = on_exit
        self._thread_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._warned = False

    def run_sync(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``fn(*args)`` on the background loop and wait for its result.

        A plain loop on a daemon thread and ``run_coroutine_threadsafe``, not an anyio
        blocking portal: through a portal, ``task.delay()`` made 2.2k jobs/s against 3.0-3.2k
        this way (same server, same run), and anyio's own portal thread would also keep a
        process from exiting until the app is closed.
        """
        if not self._warned:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                pass
            else:
                self._warned = True
                warnings.warn(
                    "jsworker: a sync enqueue (.delay/.apply) inside a running event loop blocks that "
                    "loop until the server answers; use 'await task.adelay(...)' there",
                    RuntimeWarning,
                    stacklevel=3,
                )
        loop = self._background_loop()

        async def run() -> T:
            return await fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), loop).result()

    def _background_loop(self) -> asyncio.AbstractEventLoop:
        with self._thread_lock:
            if self._pid != os.getpid():
                # Forked: the parent's thread does not exist here. Forget its loop and what
                # lived on it (never close them: that would hit the parent's).
                self._pid = os.getpid()
                self._loop = None
                if self._on_fork is not None:
                    self._on_fork()
            if self._loop is None:
                loop = asyncio.new_event_loop()
                # Daemon: a process must be able to exit without closing the app first.
                thread = threading.Thread(target=_serve, args=(loop,), name="jsworker-producer", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
                _open.add(self)
            return self._loop

    def close(self, last: Callable[[], Awaitable[None]] | None = None, timeout: float = 10.0) -> None:
        """Run ``last()`` on the background loop (closing what lives there), then stop its
        thread, waiting up to ``timeout`` seconds for each; the bridge starts again on next use."""
        with self._thread_lock:
            loop, self._loop = self._loop, None
            thread, self._thread = self._thread, None
        _open.discard(self)
        if loop is None or thread is None or self._pid != os.getpid():
            return
        if last is not None:
            asyncio.run_coroutine_threadsafe(_call(last), loop).result(timeout=timeout)
        loop.call_soon_threadsafe(loop.stop)
        # Closed means closed: the loop's last tasks ended and the loop closed. Returning
        # before, the caller's next steps (a test's teardown collecting garbage) race the
        # thread's clean-up and find the client's tasks destroyed while still pending.
        thread.join(timeout)


# Seconds an exit waits for a bridge's last steps, and again for its thread to end.
_EXIT_WAIT = 2.0
# The bridges whose loops run, closed at exit (weakly: an app dropped takes its bridge along).
_open: weakref.WeakSet[SyncBridge] = weakref.WeakSet()


@atexit.register
def _close_open_bridges() -> None:
    # Left to the interpreter's end, a daemon thread's loop is never closed: its connection's
    # pending tasks are reported destroyed, and its socket closed by nobody.
    for bridge in list(_open):
        # A server gone, or slow to answer, must neither hold the exit up for long nor turn it
        # into a traceback: every enqueue was acknowledged before its caller went on.
        with contextlib.suppress(Exception):
            bridge.close(bridge.on_exit, _EXIT_WAIT)


async def _call(fn: Callable[[], Awaitable[None]]) -> None:
    await fn()


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """The background thread: run ``loop`` until :meth:`SyncBridge.close` stops it, then let
    what is left (tasks the client cancelled on close) finish and close it, as
    ``asyncio.run`` does."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
        left = asyncio.all_tasks(loop)
        for task in left:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        asyncio.set_event_loop(None)
        loop.close()
