"""Publishing jobs for an app from async code and from sync code.

Async callers use one connection per event loop (a worker's tasks share the worker's).
Sync callers share one connection that lives on a background thread with its own event loop,
started on first use; a forked child notices it is not the parent and starts its own.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import warnings
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import (
    ConfigurationError,
    ConnectError,
    EnqueueError,
    JsworkerError,
    PermissionDeniedError,
    TopologyError,
)
from .events.emit import EventEmitter
from .jetstream.connection import Connection
from .jetstream.publish import NoStreamError, OutMessage, Publisher, Stored, SubjectTaken
from .job import Job
from .lifecycle.state import Form, JobState, JobStatus
from .scheduling.declare import DELAYED_SINCE
from .scheduling.delayed import delayed_message
from .serializers import encode_call
from .wire import (
    CONTENT_TYPE,
    ENQUEUED_AT,
    EXPECTED_LAST_SUBJECT_SEQ,
    EXPIRES_AT,
    JOB_ID,
    MSG_ID,
    QUEUE,
    TASK,
)

# A unique call that finds its key held by a job that has finished, its ack not yet stored,
# tries again after 5 ms, then twice as long each time; past a second it takes the job for
# one that will run again (its worker died before the ack) and names it as the duplicate.
_SETTLE_STEP = 0.005
_SETTLE_PATIENCE = 1.0
# The states of a job whose message is in the stream (as against scheduled).
_IN_STREAM = frozenset({JobState.QUEUED, JobState.RUNNING, JobState.RETRYING})

if TYPE_CHECKING:
    from .app import App
    from .calls import Call
    from .task import Task

T = TypeVar("T")

# One publish attempt waits this long for its acknowledgement; the app's publish_timeout
# bounds all attempts of one enqueue together.
_ATTEMPT_TIMEOUT = 5.0


class Producer:
    """Turns task calls into stored jobs for one app."""

    def __init__(self, app: App) -> None:
        self._app = app
        self._conns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Connection] = (
            weakref.WeakKeyDictionary()
        )
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._thread_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = os.getpid()
        self._warned = False

    # -- connections ----------------------------------------------------------------------

    def bind(self, conn: Connection) -> None:
        """Use ``conn`` for enqueues made on its event loop (a worker shares its own)."""
        self._conns[conn.loop] = conn

    async def connection(self) -> Connection:
        """This event loop's connection, opened on first use."""
        loop = asyncio.get_running_loop()
        conn = self._conns.get(loop)
        if conn is not None and not conn.is_closed:
            return conn
        lock = self._locks.setdefault(loop, asyncio.Lock())
        async with lock:
            conn = self._conns.get(loop)
            if conn is None or conn.is_closed:
                try:
                    conn = await Connection.open(self._app.connect_options("producer"))
                except ConnectError as exc:
                    raise EnqueueError(f"cannot enqueue: {exc}") from exc
                self._conns[loop] = conn
        return conn

    async def aclose(self) -> None:
        """Close this event loop's connection (if this producer opened one)."""
        conn = self._conns.pop(asyncio.get_running_loop(), None)
        if conn is not None:
            await conn.close()

    # -- sending --------------------------------------------------------------------------

    def message(self, task: Task[Any, Any], call: Call) -> OutMessage:
        """The message that carries ``call`` of ``task`` (for a delayed job, its schedule)."""
        app = self._app
        headers = {
            MSG_ID: call.job_id,
            TASK: task.name,
            ENQUEUED_AT: str(time.time_ns()),
            CONTENT_TYPE: app.serializer.content_type,
        }
        queue = task.queue
        if call.queue is not None:
            # Routed by the caller: the worker of that queue runs a task of another one.
            queue = headers[QUEUE] = call.queue
        if call.headers:
            headers = {**call.headers, **headers}
        if call.expires_at is not None:
            headers[EXPIRES_AT] = str(call.expires_at)
        if call.unique:
            # The server refuses the job while its subject (ending in the id, derived from the
            # key) holds one: queued or running. No dedup key, which would also refuse a new
            # job with that key for a while after the last one finished.
            del headers[MSG_ID]
            headers[JOB_ID] = call.job_id
            headers[EXPECTED_LAST_SUBJECT_SEQ] = "0"
        elif call.explicit_id:
            # An id the caller chose names one job at a time: refused while one with it waits or
            # runs, past the dedup window too. The dedup key stays, so a retry of this very
            # publish after a lost answer is recognised (see Publisher.publish).
            headers[EXPECTED_LAST_SUBJECT_SEQ] = "0"
        msg = OutMessage(
            subject=app.namespace.job_subject(queue, task.name, call.job_id),
            body=encode_call(app.serializer, call.args, call.kwargs, signature=task.signature),
            headers=headers,
        )
        if call.due is not None:
            return delayed_message(app.namespace, queue, msg, call.due)
        return msg

    async def send(self, task: Task[Any, Any], call: Call, settling: float = 0.0) -> Job:
        """Store one job; returns its receipt. (``settling``: the pause before the next try of
        a unique call whose key a finished job still holds, doubled at each try.)"""
        started = time.perf_counter()
        if call.due is not None:
            # Checked before anything is sent: an older server would store the schedule as
            # a plain message on a subject no worker reads.
            (await self.connection()).require_version("delayed jobs", DELAYED_SINCE)
        # A unique call also looks for its key in the other form (scheduled or queued); an
        # explicit id is checked in its own form only, as that lookup costs a round trip.
        if call.unique and (held := await self._held(task, call, other_form=True)) is not None:
            return self._duplicate(task, held, started)
        msg = self.message(task, call)
        try:
            stored = await self._with_topology(task, lambda p: p.publish(msg), [msg])
        except EnqueueError as exc:
            # Whatever layer said it, the caller needs the id to try again safely.
            exc.job_id = exc.job_id or call.job_id
            raise
        except SubjectTaken:
            # A unique key or an explicit id held by a job that waits or runs.
            held = await self._held(task, call, settling=settling)
            if held is None:
                # Finished in the meantime (its key is free again), or finished with its ack
                # on the way: a result can be read before the ack that frees the key lands.
                await asyncio.sleep(settling)
                return await self.send(task, call, max(2 * settling, _SETTLE_STEP))
            return self._duplicate(task, held, started)
        self._count(task, stored, started, delayed=call.due is not None)
        await self._emit_enqueued(task, [msg], stored)
        return self._receipt(task, call, stored[0])

    async def _held(
        self, task: Task[Any, Any], call: Call, other_form: bool = False, settling: float | None = None
    ) -> Job | None:
        """The receipt of the job holding a unique call's key (``duplicate=True``), or None.

        With ``other_form``, only the form the enqueue itself does not check is looked at: a
        scheduled job for an immediate call, a queued or running one for a delayed call.
        With ``settling`` below the patience for it, a job whose record says it finished is
        taken for gone: its ack is on the way.

        The job's status comes from the app's workers, or from the server when this user may
        read the job stream; a producer with neither leaves the check to the server's refusal
        of a second job on the same subject.
        """
        form: Form | None = None
        if other_form:
            form = "scheduled" if call.due is None else "waiting"
        try:
            status = await self._app.lifecycle.status(call.job_id, form)
        except JsworkerError:
            if other_form:
                return None
            status = JobStatus(call.job_id, JobState.QUEUED)  # the server refused it: one waits
        state = status.state
        if other_form:
            held = state is JobState.SCHEDULED if call.due is None else state in _IN_STREAM
        else:
            patient = settling is not None and settling >= _SETTLE_PATIENCE
            held = state is JobState.SCHEDULED or state in _IN_STREAM or patient
        if not held:
            return None
        due = status.scheduled_for if state is JobState.SCHEDULED else None
        return Job(call.job_id, task.name, task.queue, status.seq or 0, True, due, self._app)

    async def send_many(self, task: Task[Any, Any], calls: list[Call]) -> list[Job]:
        """Store many jobs with many acknowledgements outstanding; receipts in order."""
        if task.unique:
            raise ConfigurationError(f"task {task.name} is unique: enqueue its jobs one at a time")
        started = time.perf_counter()
        msgs = [self.message(task, call) for call in calls]
        stored = await self._with_topology(task, lambda p: p.publish_many(msgs), msgs)
        self._count(task, stored, started)
        await self._emit_enqueued(task, msgs, stored)
        return [self._receipt(task, call, s) for call, s in zip(calls, stored, strict=True)]

    def _duplicate(self, task: Task[Any, Any], held: Job, started: float) -> Job:
        """Count a call refused for the job that holds its id, as the server's dedup would be."""
        _, duplicates, duration = self._app.metrics.producer(task.queue, task.name)
        duplicates.inc()
        duration.observe(time.perf_counter() - started)
        return held

    def _count(
        self, task: Task[Any, Any], stored: list[Stored], started: float, delayed: bool = False
    ) -> None:
        enqueued, duplicates, duration = self._app.metrics.producer(task.queue, task.name)
        dups = sum(s.duplicate for s in stored)
        if delayed:
            # Counted as enqueued by the worker that takes it up once fired (jsworker_jobs_fired).
            self._app.metrics.scheduled.labels(task.queue, task.name).inc(len(stored) - dups)
        else:
            enqueued.inc(len(stored) - dups)
        if dups:
            duplicates.inc(dups)
        duration.observe(time.perf_counter() - started)

    async def _emit_enqueued(
        self, task: Task[Any, Any], msgs: list[OutMessage], stored: list[Stored]
    ) -> None:
        app = self._app
        if not app.options.events:
            return
        events = EventEmitter(await self.connection(), app.namespace, app.metrics)
        for msg, receipt in zip(msgs, stored, strict=True):
            if not receipt.duplicate:
                await events.enqueued(task.queue, msg.headers)

    async def _with_topology(
        self,
        task: Task[Any, Any],
        op: Callable[[Publisher], Awaitable[Stored | list[Stored]]],
        msgs: list[OutMessage],
    ) -> list[Stored]:
        try:
            conn = await self.connection()
            publisher = Publisher(conn, timeout=_ATTEMPT_TIMEOUT, retry_for=self._app.options.publish_timeout)
            try:
                try:
                    result = await op(publisher)
                except NoStreamError as missing:
                    # Either the first enqueue on a fresh server (create the streams) or a stream
                    # whose leader is being elected or moved (a node entering lame duck answers "no
                    # responders" for a moment; creating fails or finds it): either way, try again
                    # for publish_timeout. A user that may not create streams waits too: a worker
                    # starting beside it creates them.
                    denied: PermissionDeniedError | None = None
                    try:
                        await self._app.provision_streams(conn)
                    except PermissionDeniedError as exc:
                        denied = exc
                    except TopologyError:
                        pass
                    publisher.retry_no_stream = True
                    try:
                        result = await op(publisher)
                    except EnqueueError as failed:
                        if denied is None:
                            raise
                        raise EnqueueError(
                            f"cannot enqueue: {missing} within {self._app.options.publish_timeout:g}s, "
                            "and this user may not create the app's streams (a worker creates them "
                            "when it starts)"
                        ) from failed
            except PermissionDeniedError as denied:
                stored = (
                    "; the job may have been stored (only its acknowledgement was refused), and "
                    "enqueueing it again with the same job id cannot duplicate it"
                    if denied.operation == "subscribe"
                    else ""
                )
                raise EnqueueError(f"cannot enqueue: {denied}{stored}") from denied
            return result if isinstance(result, list) else [result]
        except EnqueueError:
            # The whole call failed: some of its jobs may be stored, none has a receipt.
            self._app.metrics.enqueue_failures.labels(task.queue, task.name).inc(len(msgs))
            raise

    def _receipt(self, task: Task[Any, Any], call: Call, stored: Stored) -> Job:
        return Job(
            id=call.job_id,
            task=task.name,
            queue=call.queue or task.queue,
            seq=stored.seq,
            duplicate=stored.duplicate,
            scheduled_for=call.due,
            app=self._app,
        )

    # -- the sync bridge ------------------------------------------------------------------

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
                # Forked: the parent's thread does not exist here and its socket is the
                # parent's. Forget both (never close them: that would hit the parent's).
                self._pid = os.getpid()
                self._loop = None
                self._conns = weakref.WeakKeyDictionary()
                self._locks = weakref.WeakKeyDictionary()
            if self._loop is None:
                loop = asyncio.new_event_loop()
                # Daemon: a process must be able to exit without closing the app first.
                thread = threading.Thread(target=_serve, args=(loop,), name="jsworker-producer", daemon=True)
                thread.start()
                self._loop = loop
            return self._loop

    def close(self) -> None:
        """Close the background connection and stop its thread (it is restarted on next use)."""
        with self._thread_lock:
            loop, self._loop = self._loop, None
        if loop is None or self._pid != os.getpid():
            return
        asyncio.run_coroutine_threadsafe(self.aclose(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """The background thread: run ``loop`` until :meth:`Producer.close` stops it, then let
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
