"""Publishing jobs for an app: a task's calls become stored jobs and receipts.

The connections are the app's (:mod:`jsworker._core.connections`, one per event loop), sync callers
come through its bridge (:mod:`jsworker._core.bridge`). What features add to an enqueue is given to
the producer by the app: how a delayed job is stored (the scheduling feature), and what is
told once jobs are stored (job events); a unique call's lookup is the app's job lifecycle.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from .._core.job_status import JobState, JobStatus
from .._core.serializers import encode_call
from .._core.view import AppView
from .._errors import (
    ConfigurationError,
    EnqueueError,
    JsworkerError,
    PermissionDeniedError,
    TopologyError,
)
from .._limits.spec import partition_of, partition_token
from .._wire.headers import (
    CONTENT_TYPE,
    ENQUEUED_AT,
    EXPECTED_LAST_SUBJECT_SEQ,
    EXPECTED_LAST_SUBJECT_SEQ_SUBJECT,
    EXPIRES_AT,
    JOB_ID,
    MSG_ID,
    PARTITION,
    QUEUE,
    TASK,
)
from .._wire.names import Namespace
from ..jetstream.connection import Connection
from ..jetstream.publish import NoStreamError, OutMessage, Publisher, Stored, SubjectTaken
from .receipt import Job

if TYPE_CHECKING:
    from .calls import Call
    from .task import Task

# A unique call that finds its key held by a job that has finished, its ack not yet stored,
# tries again after 5 ms, then twice as long each time; past a second it takes the job for
# one that will run again (its worker died before the ack) and names it as the duplicate.
_SETTLE_STEP = 0.005
_SETTLE_PATIENCE = 1.0
# The states of a job whose message is in the stream (as against scheduled).
_IN_STREAM = frozenset({JobState.QUEUED, JobState.RUNNING, JobState.RETRYING, JobState.SNOOZED})

# One publish attempt waits this long for its acknowledgement; the app's publish_timeout
# bounds all attempts of one enqueue together.
_ATTEMPT_TIMEOUT = 5.0


def hold_key(namespace: Namespace, headers: dict[str, str], job_id: str) -> None:
    """Make the message ``headers`` go with refused while job ``job_id`` holds its key in any
    form in the first job stream (see :meth:`~jsworker._wire.names.Namespace.unique_filter`)."""
    headers[EXPECTED_LAST_SUBJECT_SEQ] = "0"
    headers[EXPECTED_LAST_SUBJECT_SEQ_SUBJECT] = namespace.unique_filter(job_id)


class DelayedStore(Protocol):
    """How a delayed job is stored on the server: the scheduling feature's part of an enqueue
    (:class:`jsworker._scheduling.delayed.DelayedJobs`)."""

    def check(self, conn: Connection) -> None:
        """Raise when the server behind ``conn`` cannot keep delayed jobs."""
        ...

    def message(self, namespace: Namespace, queue: str, job: OutMessage, due: datetime) -> OutMessage:
        """The message that stores ``job`` until ``due``, then puts it in ``queue``."""
        ...


#: Told of the jobs one enqueue stored (connection, queue, each job's headers), when the app
#: emits job events.
EnqueuedHook = Callable[[Connection, str, list[Mapping[str, str]]], Awaitable[None]]


class Producer:
    """Turns task calls into stored jobs for one app."""

    def __init__(self, app: AppView, delayed: DelayedStore, enqueued: EnqueuedHook | None = None) -> None:
        self._app = app
        self._delayed = delayed
        self._enqueued = enqueued
        # The connections an enqueue got through on: their server has the job stream, and "no
        # stream" there later means its leader is being elected, which creating streams would
        # only wait out longer.
        self._stream_seen: weakref.WeakSet[Connection] = weakref.WeakSet()

    # -- connections ----------------------------------------------------------------------

    async def connection(self) -> Connection:
        """This event loop's connection, opened on first use (``app.connections``)."""
        return await self._app.connections.connection()

    # -- sending --------------------------------------------------------------------------

    def message(self, task: Task[Any, Any], call: Call, *, spread: bool = True) -> OutMessage:
        """The message that carries ``call`` of ``task`` (for a delayed job, its schedule).
        Without ``spread``, the job goes to partition 0 whatever its queue's partitions: a
        workflow's step, stored in one batch with its workflow's state there."""
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
            # The server refuses the job while its key (the id, derived from the key) is held
            # in any form: queued, running, delayed or a schedule. One check, in the publish
            # itself. No dedup key, which would also refuse a new job with that key for a
            # while after the last one finished.
            del headers[MSG_ID]
            headers[JOB_ID] = call.job_id
            hold_key(app.namespace, headers, call.job_id)
        elif call.explicit_id:
            # An id the caller chose names one job at a time: refused while one with it waits or
            # runs, past the dedup window too. The dedup key stays, so a retry of this very
            # publish after a lost answer is recognised (see Publisher.publish).
            headers[EXPECTED_LAST_SUBJECT_SEQ] = "0"
        # Unique jobs stay in partition 0, whose stream holds every form of a key.
        partition = app.job_partition(queue, call.job_id) if spread and not call.unique else 0
        subject = app.namespace.job_subject(queue, task.name, call.job_id, partition)
        declared = app.queue_options.get(queue)
        if declared is not None and declared.fair and call.due is None:
            subject = self._intake(task, call, queue, headers)
        msg = OutMessage(
            subject=subject,
            body=encode_call(app.serializer, call.args, call.kwargs, signature=task.signature),
            headers=headers,
        )
        if call.due is not None:
            return self._delayed.message(app.namespace, queue, msg, call.due)
        return msg

    def _intake(self, task: Task[Any, Any], call: Call, queue: str, headers: dict[str, str]) -> str:
        """Where a job for fair queue ``queue`` waits for its partition's turn; its partition
        goes in ``headers``. (A delayed job joins the queue itself when due.)"""
        if call.unique:
            raise ConfigurationError(
                f"task {task.name}: unique jobs cannot go to fair queue {queue!r} (its jobs wait for "
                "their turn where a unique key cannot be held)"
            )
        if task.partition_key is None:
            key = task.name  # the tasks of the queue take turns
        else:
            try:
                key = partition_of(task.partition_key, task.signature, list(call.args), dict(call.kwargs))
            except ValueError as exc:
                raise ValueError(f"task {task.name}: {exc}") from exc
        headers[PARTITION] = partition_token(key)
        return self._app.namespace.intake_subject(queue, task.name, call.job_id)

    async def send(self, task: Task[Any, Any], call: Call, settling: float = 0.0) -> Job:
        """Store one job; returns its receipt. (``settling``: the pause before the next try of
        a unique call whose key a finished job still holds, doubled at each try.)"""
        started = time.perf_counter()
        if call.due is not None:
            # Checked before anything is sent: an older server would store the schedule as
            # a plain message on a subject no worker reads.
            self._delayed.check(await self.connection())
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

    async def _held(self, task: Task[Any, Any], call: Call, settling: float) -> Job | None:
        """The receipt of the job holding the id the server refused ``call`` for
        (``duplicate=True``), or None when none holds it any more.

        With ``settling`` below the patience for it, a job whose record says it finished is
        taken for gone: its ack is on the way.

        The job's status comes from the app's workers, or from the server when this user may
        read the job stream; a producer with neither names the job as held, as the server did.
        """
        try:
            status = await self._app.lifecycle.status(call.job_id)
        except JsworkerError:
            status = JobStatus(call.job_id, JobState.QUEUED)  # the server refused it: one waits
        state = status.state
        held = state is JobState.SCHEDULED or state in _IN_STREAM or settling >= _SETTLE_PATIENCE
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
        if self._enqueued is None or not self._app.options.events:
            return
        fresh = [msg.headers for msg, receipt in zip(msgs, stored, strict=True) if not receipt.duplicate]
        await self._enqueued(await self.connection(), task.queue, fresh)

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
                    # for publish_timeout. A user that may not create streams waits too: the
                    # provisioning step (`jsworker provision`) may be running beside it.
                    denied: PermissionDeniedError | None = None
                    if conn not in self._stream_seen:
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
                            "and this user may not create the app's streams (run `jsworker provision` "
                            "with the provisioner's credentials)"
                        ) from failed
            except PermissionDeniedError as denied:
                stored = (
                    "; the job may have been stored (only its acknowledgement was refused), and "
                    "enqueueing it again with the same job id cannot duplicate it"
                    if denied.operation == "subscribe"
                    else ""
                )
                raise EnqueueError(f"cannot enqueue: {denied}{stored}") from denied
            self._stream_seen.add(conn)
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
