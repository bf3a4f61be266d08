"""What :class:`~jsworker.admin.Admin` does to a queue or a single job beyond the features'
own calls: pause, resume and purge a queue, run a retrying job now, and read what the server
keeps of one job (its message, its result).

* **pause / resume**: the server's pause of the queue's consumer (``CONSUMER.PAUSE``,
  nats-server 2.11+, :mod:`jsworker.jetstream.pause`). While paused, the consumer hands out
  nothing: workers keep their pull requests open and take the queue's jobs again once it is
  resumed; jobs already handed out run to the end. The pause is kept by the server (a
  restarted worker does not end it) and ends by itself at its ``until``.
* **purge**: one ``STREAM.PURGE`` of the queue's subjects. The server purges from the oldest
  message on, so it cannot spare the jobs in flight (their messages are older than every
  waiting one): their workers finish the attempt they are running, but one that fails is not
  tried again and one waiting out a retry's delay never runs again. Delayed jobs of the queue
  (their schedules) stay.
* **cancel, asked**: a role that may not cancel on its own (the dashboard) asks the workers on
  ``jsw.<app>.ask.cancel.<job id>``, as a canceller does; whichever worker gets the question
  carries the cancel out.
* **retry now**: a job waiting out a retry's delay (or a snooze) sits on the server as a
  delivery its consumer will hand out again at the end of the delay, and nothing shortens
  that delay but the worker that asked for it. So a copy of its message is stored as a new job under the same
  id (as a replayed dead letter is, starting at attempt 1), then the waiting message deleted.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from .._core.layout import consumer_spec
from .._enqueue.calls import is_job_id
from .._errors import ConfigurationError, JsworkerError, NoWorkerRunning, ScheduleNotFound
from .._lifecycle.bucket import RECORDS_SINCE, Records
from .._lifecycle.lookup import current_message
from .._lifecycle.replace import job_copy, replace
from .._observability.logging import get_logger
from .._wire import headers as wire
from .._wire.names import validate_name
from ..jetstream.connection import Connection
from ..jetstream.inspect import consumer_facts
from ..jetstream.limits_stream import LimitsStream, StoredMessage
from ..jetstream.pause import PauseState, pause_consumer
from ..jetstream.service import NobodyAnswered, ask
from ..jetstream.topology import apply_consumer, stream_exists

if TYPE_CHECKING:
    from .._app import App

log = get_logger("jsworker.admin")

#: How long a pause without an end lasts: a century, within what the server's clock can count
#: (its durations end at 292 years).
FOREVER = timedelta(days=36_525)
# A retrying job due sooner than this is left alone: its consumer may be handing it out now.
_DUE_MARGIN = 1.0
#: Header of a job stored by a retry now: the stream sequence of the message it replaced.
RETRIED_FROM = "Jsw-Retried-From"


@dataclass(frozen=True, slots=True)
class JobResult:
    """What a job's record holds of its return value: the bytes as the serializer wrote them
    and their content type (``application/json`` for the default serializer)."""

    content_type: str | None
    value: bytes


async def pause_queue(app: App, conn: Connection, queue: str, until: datetime | None) -> PauseState:
    """Pause ``queue``'s consumer until ``until`` (for good when None; see the module)."""
    validate_name("queue", queue)
    end = until if until is not None else datetime.now(UTC) + FOREVER
    if end.tzinfo is None:
        raise ConfigurationError("pause until an aware datetime (with its time zone)")
    state = await _pause_partitions(app, conn, queue, end)
    log.info("queue.paused", queue=queue, until=state.until.isoformat() if state.until else None)
    return state


async def resume_queue(app: App, conn: Connection, queue: str) -> bool:
    """Resume ``queue``'s consumer; False when it was not paused."""
    validate_name("queue", queue)
    before = await _pause_of(app, conn, queue)
    await _pause_partitions(app, conn, queue, None)
    log.info("queue.resumed", queue=queue, was_paused=before)
    return before


async def _pause_partitions(app: App, conn: Connection, queue: str, end: datetime | None) -> PauseState:
    """Pause (until ``end``) or resume (None) the consumers of every partition of ``queue``;
    partition 0's state.

    A queue of the app that no worker has served yet has no consumer: one pausing it (an
    operator pausing ahead of a deploy) makes it first, as its first worker would, so that
    its workers start paused. Its job streams must exist (they do once anything was enqueued
    or provisioned): a stream is never made, nor made again, by a pause. Where this user may
    not create consumers, the error names ``jsworker provision``, which makes them all."""
    streams = [app.namespace.partition_stream(k) for k in range(app.queue_streams(queue))]
    states = await asyncio.gather(*(pause_consumer(conn, stream, queue, end) for stream in streams))
    if end is None or all(state is not None for state in states):
        return states[0] or PauseState(False)
    if queue not in app.queues:
        raise ConfigurationError(
            f"queue {queue!r} has no consumer on the server, and the app declares no such queue "
            f"(its queues: {', '.join(sorted(app.queues))})"
        )
    for k, (stream, state) in enumerate(zip(streams, states, strict=True)):
        if state is not None:
            continue
        if not await stream_exists(conn, stream):
            raise ConfigurationError(
                f"queue {queue!r} has no consumer, and its job stream {stream} does not exist: "
                "make them with `jsworker provision`, then pause"
            )
        await apply_consumer(conn, consumer_spec(app, queue, k))
    states = await asyncio.gather(*(pause_consumer(conn, stream, queue, end) for stream in streams))
    if states[0] is None:
        raise ConfigurationError(f"queue {queue!r} still has no consumer on the server after making it")
    return states[0]


async def _pause_of(app: App, conn: Connection, queue: str) -> bool:
    """Whether ``queue``'s consumers are paused now (False without one): any of its partitions'."""
    found = await asyncio.gather(
        *(consumer_facts(conn, app.namespace.partition_stream(k)) for k in range(app.queue_streams(queue)))
    )
    return any(facts.paused for partition in found for facts in partition if facts.name == queue)


async def purge_queue(app: App, conn: Connection, queue: str, task: str | None = None) -> int:
    """Remove every job of ``queue`` (of ``task`` in it, when given) the job stream holds
    (see the module); how many. A task's jobs are one subject filter each partition: the
    server purges them without a listing, however many there are."""
    validate_name("queue", queue)
    if task is not None:
        validate_name("task", task)
    ns = app.namespace
    jobs = LimitsStream(conn, ns.stream)
    removed = 0
    for k in range(app.queue_streams(queue)):
        of_task = f"{ns.job_subject(queue, task, partition=k)}.>" if task is not None else None
        subjects = of_task or ns.queue_filter(queue, k)
        removed += await LimitsStream(conn, ns.partition_stream(k)).purge(subjects)
    if queue in app.fair_queues:
        # And those waiting for their turn (its intake's markers go too, which only roll up).
        removed += await jobs.purge(app.namespace.intake_filter(queue, task=task))
    log.info("queue.purged", queue=queue, task=task, removed=removed)
    return removed


async def ask_to_cancel(app: App, conn: Connection, job_id: str) -> bool:
    """Ask the workers to cancel ``job_id`` (see the module): what the one that got the
    question answered; :class:`~jsworker.NoWorkerRunning` when no worker runs to answer."""
    return await _ask_workers(app, conn, "cancel", job_id, f"cancel job {job_id}")


async def ask_to_pause(app: App, conn: Connection, name: str, paused: bool) -> bool:
    """Ask the workers to pause (or resume) periodic schedule ``name``, for a user that may
    not write the schedules stream: whether that changed something;
    :class:`~jsworker.ScheduleNotFound` when there is no such schedule."""
    verb = "pause" if paused else "resume"
    return await _ask_workers(app, conn, verb, name, f"{verb} schedule {name}")


#: How long a question to one worker waits for its answer: a live one answers at once, and the
#: others' silence is all an unknown id gets.
_WORKER_ANSWER = 3.0


async def ask_worker(app: App, conn: Connection, question: Literal["quiet", "stop"], worker_id: str) -> bool:
    """Ask worker ``worker_id`` (its registry id) to go quiet (take no new job) or to stop:
    whether that changed something; :class:`~jsworker.JsworkerError` when no worker of that
    id answered."""
    if not is_job_id(worker_id):
        raise ConfigurationError(f"invalid worker id {worker_id!r:.80}")
    subject = app.namespace.worker_ask_subject(worker_id, question)
    return bool(await _ask(app, conn, subject, question, f"{question} worker {worker_id}", _WORKER_ANSWER))


async def ask_to_put_schedule(app: App, conn: Connection, name: str, spec: Mapping[str, Any]) -> str:
    """Ask the workers to create or change schedule ``name`` as ``spec`` says (see
    :func:`~jsworker._scheduling.declare.schedule_of`), for a user that may not write the
    schedules stream: ``created``, ``updated`` or ``unchanged``; :class:`JsworkerError` with
    the workers' reason when they refuse it."""
    subject = app.namespace.ask_subject("schedule", validate_name("schedule", name))
    body = json.dumps(dict(spec)).encode()
    done = await _ask(
        app, conn, subject, "schedule", f"put schedule {name}", app.options.publish_timeout, body
    )
    return str(done)


async def ask_to_set_limits(
    app: App, conn: Connection, queue: str, asked: Mapping[str, Any]
) -> dict[str, str]:
    """Ask the workers to change the limits of ``queue`` (see
    :func:`~jsworker._limits.overrides.check_limits`): the overrides it keeps now;
    :class:`JsworkerError` with the workers' reason when they refuse."""
    subject = app.namespace.ask_subject("limits", validate_name("queue", queue))
    body = json.dumps(dict(asked)).encode()
    kept = await _ask(
        app, conn, subject, "limits", f"change the limits of queue {queue}", app.options.publish_timeout, body
    )
    return {str(k): str(v) for k, v in dict(kept).items()}


async def _ask_workers(app: App, conn: Connection, question: str, key: str, what: str) -> bool:
    subject = app.namespace.ask_subject(question, key)
    return bool(await _ask(app, conn, subject, question, what, app.options.publish_timeout))


async def _ask(
    app: App, conn: Connection, subject: str, question: str, what: str, timeout: float, body: bytes = b""
) -> Any:
    """What the worker answering ``question`` on ``subject`` says (``what``: the request in
    words, for the errors)."""
    try:
        raw = await ask(conn, subject, body, timeout)
    except NobodyAnswered:
        raise NoWorkerRunning(
            f"cannot {what}: no worker of app {app.name} is running to carry it out "
            f"(this user may only ask the workers to {question})"
        ) from None
    except TimeoutError as exc:
        raise JsworkerError(f"cannot {what}: {exc}") from None
    answer = json.loads(raw)
    if answer.get("missing"):
        raise ScheduleNotFound(answer["error"])
    if "error" in answer:
        raise JsworkerError(f"cannot {what}: {answer['error']}")
    return answer["value"]


async def retry_now(app: App, conn: Connection, job_id: str) -> bool:
    """Run the retrying (or snoozed) job ``job_id`` now rather than at the end of its delay
    (see the module): True when its copy was stored, False when it is not waiting out a delay
    (or its delay ends within a second anyway)."""
    if conn.server_version < RECORDS_SINCE:
        return False  # no records: a retrying job cannot be told from a running one
    found = await Records(conn, app.namespace).read(job_id)
    message = await current_message(app, conn, job_id)
    if found is None or message is None:
        return False
    record = found[1]
    if not record.state.resting or record.seq != message.seq:
        return False
    if (record.next_attempt_at or 0.0) <= time.time() + _DUE_MARGIN:
        return False
    copy = job_copy(
        app.namespace,
        job_id,
        message,
        "retry",
        {wire.ENQUEUED_AT: str(time.time_ns()), RETRIED_FROM: str(message.seq)},
    )
    if copy is None:
        return False
    stored = await replace(conn, app.namespace, message, copy, app.options.publish_timeout)
    if stored is None:
        return False  # settled or cancelled meanwhile
    log.info("job.retried_now", job_id=job_id, seq=stored.seq, replaced=message.seq)
    return True


async def job_message(app: App, conn: Connection, job_id: str) -> StoredMessage | None:
    """The message the server holds for job ``job_id`` with its body: while it waits, runs or
    retries its message in the job stream, while it is scheduled its delayed job's schedule (or
    the message it was enqueued as);
    None once it has left (finished: its dead letter, if it failed, is among the dead letters)."""
    message = await current_message(app, conn, job_id)
    if message is not None:
        return message
    ns = app.namespace
    scheduled = await LimitsStream(conn, ns.schedules_stream).next(ns.delayed_filter(job_id=job_id))
    return scheduled or await LimitsStream(conn, ns.stream).next(ns.later_filter(job_id=job_id))


async def job_result(app: App, conn: Connection, job_id: str) -> JobResult | None:
    """The return value job ``job_id``'s record keeps (tasks with ``store_result``), None
    when it keeps none."""
    if conn.server_version < RECORDS_SINCE:
        return None
    found = await Records(conn, app.namespace).read(job_id)
    if found is None or found[1].value is None:
        return None
    return JobResult(found[1].content_type, found[1].value)
