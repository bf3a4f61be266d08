"""The two moves workers make between the job stream, which producers write, and the schedules
stream, which only workers and operators write (see :mod:`jsworker.naming`):

* a delayed job a producer enqueued (``later``) becomes an ``@at`` schedule the worker makes
  from its subject, so that no producer ever writes a schedule;
* a job a schedule fired goes into its queue, after the worker claimed its firing (see
  :mod:`.claims`): the claim's holder travels with the job, and a job runs as fired only while
  the claim still names it, so a producer cannot pass a job of its own off as a firing.

Both moves are idempotent: each message written carries a dedup key, and a claim already held
by the same fired message is taken as the worker's own. A message that cannot move yet (the
server did not answer) is given back and moved again a second later, by this worker or
another; nothing is lost while no worker runs, it waits in its stream.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ..deadletters.format import dead_letter_message
from ..errors import JsworkerError, WriteRefused
from ..jetstream.consume import ConsumeError, PullConsumer
from ..jetstream.stored import SubjectMoved, write
from ..layout import FIRED_CONSUMER, LATER_CONSUMER
from ..observability.logging import get_logger
from ..observability.metrics import UNKNOWN
from ..wire import FIRED_BY, FIRED_CLAIM, FIRED_NEXT, MSG_ID, SCHEDULE_NEXT, SCHEDULER, TASK
from .claims import CANCELLED, claim
from .delayed import schedule_message
from .firing import firing

if TYPE_CHECKING:
    from ..appview import AppView
    from ..jetstream.connection import Connection
    from ..jetstream.delivery import Delivery

log = get_logger("jsworker.schedules")

# Messages moved at once by one worker: each move is one or two round trips to the server.
_IN_FLIGHT = 64
# Seconds before a message that could not move is offered again: soon when the server did not
# answer, later when it refused (a full stream, permissions being fixed).
_RETRY = 1.0
_REFUSED = 30.0


class Relay:
    """Moves the messages of one consumer with ``move``: each is acknowledged once moved (or
    found to need no move), given back for a retry when the server could not be reached."""

    def __init__(
        self, conn: Connection, stream: str, consumer: str, move: Callable[[Delivery], Awaitable[None]]
    ) -> None:
        self.conn, self.stream, self.consumer, self.move = conn, stream, consumer, move
        self._slots = asyncio.Semaphore(_IN_FLIGHT)
        self._moving: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        """Move messages for as long as the worker runs; a consumer that went away (a server
        restarted without its store) is pulled again once it is back."""
        while True:
            try:
                async with PullConsumer(
                    self.conn, self.stream, self.consumer, max_messages=_IN_FLIGHT
                ) as pull:
                    while (delivery := await pull.next()) is not None:
                        await self._slots.acquire()
                        task = asyncio.create_task(self._one(delivery))
                        self._moving.add(task)
                        task.add_done_callback(self._moving.discard)
            except ConsumeError as exc:
                log.warning("relay.stopped", consumer=self.consumer, error=str(exc))
            await asyncio.sleep(_RETRY)

    async def _one(self, delivery: Delivery) -> None:
        try:
            await self.move(delivery)
        except JsworkerError as exc:
            log.warning("relay.retry", consumer=self.consumer, seq=delivery.stream_seq, error=str(exc))
            await delivery.nak(_REFUSED if isinstance(exc, WriteRefused) and not exc.transient else _RETRY)
        except Exception:
            # A bug here must not stop the moves: this message is offered again, later.
            log.exception("relay.failed", consumer=self.consumer, seq=delivery.stream_seq)
            await delivery.nak(_REFUSED)
        else:
            await delivery.ack()
        finally:
            self._slots.release()


def relays(app: AppView, conn: Connection) -> list[Callable[[], Awaitable[None]]]:
    """The two moves a worker runs on a server with schedules (services of the worker)."""
    ns = app.namespace
    later = Relay(conn, ns.stream, LATER_CONSUMER, lambda d: schedule_delayed(app, conn, d))
    fired = Relay(conn, ns.schedules_stream, FIRED_CONSUMER, lambda d: queue_fired(app, conn, d))
    return [later.run, fired.run]


async def schedule_delayed(app: AppView, conn: Connection, delivery: Delivery) -> None:
    """Make the delayed job enqueued as ``delivery`` a schedule in the schedules stream.

    A unique job whose id is already scheduled is dropped (the producer's own check only saw
    the job stream); a message that is no delayed job is dead-lettered with the reason."""
    ns = app.namespace
    try:
        schedule = schedule_message(ns, delivery.subject, delivery.body, delivery.headers)
    except ValueError as exc:
        await _dead_letter(app, conn, delivery, str(exc))
        return
    try:
        await write(conn, schedule.subject, schedule.body, schedule.headers)
    except SubjectMoved:
        # The job's id is scheduled already (a unique job, or this very message moved before
        # its acknowledgement was lost).
        log.info("delayed.already_scheduled", job_id=schedule.headers[MSG_ID])


async def queue_fired(app: AppView, conn: Connection, delivery: Delivery) -> None:
    """Move the job a schedule fired as ``delivery`` into its queue, once per firing.

    The firing is claimed first; a second copy of it (the server fired one schedule twice) or
    one cancelled as it fired finds the claim taken and is dropped here, counted."""
    ns = app.namespace
    try:
        subject = ns.unfired_subject(delivery.subject)
    except ValueError:
        await _dead_letter(app, conn, delivery, "fired onto a subject that is no queue's")
        return
    headers = {k: v for k, v in delivery.headers.items() if not k.lower().startswith("nats-")}
    # The server's marks go under names a stream without schedules takes.
    headers[FIRED_BY] = delivery.headers.get(SCHEDULER, "")
    headers[FIRED_NEXT] = delivery.headers.get(SCHEDULE_NEXT, "")
    found = firing(headers)
    holder = f"{delivery.stream_seq}.{secrets.token_hex(8)}"
    if found is not None:
        held = await claim(conn, ns, found.job_id, found.due_ms, holder)
        if held is not None and held.split(".", 1)[0] != str(delivery.stream_seq):
            _dropped(app, subject, delivery.stream_seq, "cancelled" if held == CANCELLED else "duplicate")
            return
        holder = held or holder  # this message's own claim, made before a retry
    # Without an identity it is claimed by nobody: the worker that takes it refuses it.
    headers[FIRED_CLAIM] = holder if found is not None else ""
    headers[MSG_ID] = f"fired-{holder}"
    await write(conn, subject, delivery.body, headers)


def _dropped(app: AppView, subject: str, seq: int, reason: str) -> None:
    """Count a firing dropped unmoved (``subject``: the job subject it would have gone to)."""
    parsed = app.namespace.parse_job_subject(subject)
    queue, task = parsed if parsed is not None else (UNKNOWN, UNKNOWN)
    label = task if task in app.tasks else UNKNOWN
    app.metrics.fired_dropped.labels(queue, label, reason).inc()
    log.info("job.fired_dropped", reason=reason, queue=queue, task=label, seq=seq)


async def _dead_letter(app: AppView, conn: Connection, delivery: Delivery, reason: str) -> None:
    task = delivery.headers.get(TASK, "")
    log.warning("relay.refused", subject=delivery.subject, reason=reason)
    letter = dead_letter_message(
        app.namespace,
        subject=delivery.subject,
        body=delivery.body,
        headers=delivery.headers,
        job_id=f"seq-{delivery.stream_seq}",
        task=task,
        queue=UNKNOWN,
        attempt=1,
        reason=reason,
        error=None,
        max_payload=conn.max_payload,
    )
    await write(conn, letter.subject, letter.body, letter.headers)
