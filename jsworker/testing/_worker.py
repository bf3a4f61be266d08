"""A worker inside a test: the jobs a test enqueues run, and its assertions can wait for them.

``async with running_worker(app):`` runs one on the test's own event loop; ``with
worker_thread(app):`` runs one on an event loop of its own in a thread, for sync tests (the
app's sync enqueues run on yet another loop, the app's own). Either starts before the block and
is stopped at its end with a short grace: jobs still running then are handed back, as a
stopping ``jsworker run`` does. Options are those of ``jsworker run`` (``concurrency=``,
``queues=``, ...); tests need few slots, so ``concurrency`` is 10 unless given.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._app import App
    from .._runtime.settings import WorkerSettings
    from .._runtime.worker import Worker

# Seconds a test waits for its worker to start (connect, create its consumers).
_START = 30.0


def _settings(given: dict[str, Any]) -> WorkerSettings:
    # Imported here: the pytest plugin imports this package in every test run, worker or not.
    from .._runtime.settings import WorkerSettings

    return WorkerSettings(**{"concurrency": 10, "grace": 1.0, **given})


@asynccontextmanager
async def running_worker(app: App, **settings: Any) -> AsyncIterator[Worker]:
    """A worker of ``app`` on this event loop for the block (see the module's docstring).
    A worker that cannot start raises its error here."""
    from .._runtime.worker import Worker

    worker = Worker(app, _settings(settings))
    task = asyncio.get_running_loop().create_task(worker.run(), name="jsworker-test-worker")
    started = asyncio.ensure_future(worker.started.wait())
    try:
        await asyncio.wait({task, started}, timeout=_START, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()  # its error; or a worker that stopped at once
            raise RuntimeError("the worker stopped as it started")
        if not started.done():
            raise TimeoutError(f"the worker did not start within {_START:g}s")
        yield worker
    finally:
        started.cancel()
        worker.stop()
        await task


@contextmanager
def worker_thread(app: App, **settings: Any) -> Iterator[None]:
    """:func:`running_worker` on an event loop of its own in a thread, for sync tests."""
    ready = threading.Event()
    failed: list[BaseException] = []
    running: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    async def serve() -> None:
        stopping = asyncio.Event()
        running.append((asyncio.get_running_loop(), stopping))
        try:
            async with running_worker(app, **settings):
                ready.set()
                await stopping.wait()
        except BaseException as exc:  # raised in the test's thread, not lost in this one
            failed.append(exc)
        finally:
            ready.set()

    # asyncio.run ends the loop as a program's own would: what is left on it (the app's
    # connection for jobs that enqueue, its guard) is cancelled and finished, not destroyed
    # pending when the loop is collected.
    thread = threading.Thread(target=asyncio.run, args=(serve(),), name="jsworker-test-worker")
    thread.start()
    try:
        ready.wait()
        if failed:
            raise failed[0]
        yield
    finally:
        for loop, stopping in running:
            with contextlib.suppress(RuntimeError):  # closed: the worker ended already
                loop.call_soon_threadsafe(stopping.set)
        thread.join()
    if failed:
        raise failed[0]  # the worker failed while the block ran
