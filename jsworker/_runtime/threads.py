"""Running sync task functions on a fixed set of threads.

Each job's function runs in the job's context (so ``current_job()`` works in the thread), and
results come back to the event loop in batches: a thread that finishes while a hand-back is
already scheduled only appends to it. Under load that turns one loop wake-up per job into
one per batch, which is most of what a thread hand-off costs for short sync tasks (against
``anyio.to_thread.run_sync``: bench/README.md, "Hot-path choices").
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

_Work = tuple["asyncio.Future[Any]", contextvars.Context, Callable[..., Any], tuple[Any, ...], dict[str, Any]]
_Result = tuple["asyncio.Future[Any]", Any, BaseException | None]


class ThreadRunner:
    """Up to ``threads`` daemon threads that run sync calls for one event loop.

    A call whose awaiting coroutine is cancelled (a shutdown) is abandoned, not stopped:
    Python cannot interrupt a thread, so the call runs to its end and its result is dropped. A
    timeout does not cancel it: the executor waits for the thread (see ``Executor._outlive``).
    Threads are daemons so such a call cannot keep the process alive at exit.
    """

    def __init__(self, threads: int) -> None:
        if threads < 1:
            raise ValueError("threads must be >= 1")
        self.threads = threads
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._started: list[threading.Thread] = []
        self._results: deque[_Result] = deque()
        self._lock = threading.Lock()
        self._hand_back_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``fn(*args, **kwargs)`` in a thread and return (or raise) what it did."""
        return await self.submit(fn, *args, **kwargs)

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        """Start ``fn(*args, **kwargs)`` in a thread; the future resolves when it returns."""
        loop = asyncio.get_running_loop()
        if not self._started:
            self._loop = loop
            for i in range(self.threads):
                thread = threading.Thread(target=self._serve, name=f"jsworker-sync-{i}", daemon=True)
                thread.start()
                self._started.append(thread)
        future: asyncio.Future[Any] = loop.create_future()
        self._work.put((future, contextvars.copy_context(), fn, args, kwargs))
        return future

    def close(self) -> None:
        """Let idle threads end; calls still running finish on their own."""
        for _ in self._started:
            self._work.put(None)
        self._started.clear()

    def _serve(self) -> None:
        while (work := self._work.get()) is not None:
            future, context, fn, args, kwargs = work
            if future.cancelled():  # a hint only (read across threads): skip work nobody awaits
                continue
            try:
                result: _Result = (future, context.run(fn, *args, **kwargs), None)
            except BaseException as exc:  # handed to the awaiting coroutine, which classifies it
                result = (future, None, exc)
            with self._lock:
                self._results.append(result)
                if self._hand_back_scheduled:
                    continue
                self._hand_back_scheduled = True
            assert self._loop is not None
            try:
                self._loop.call_soon_threadsafe(self._hand_back)
            except RuntimeError:
                return  # the loop is closed: nobody is waiting any more

    def _hand_back(self) -> None:
        with self._lock:
            results = list(self._results)
            self._results.clear()
            self._hand_back_scheduled = False
        for future, value, exc in results:
            if future.done():
                continue
            if exc is None:
                future.set_result(value)
            else:
                future.set_exception(exc)
