"""The two moves workers make between the job stream, which producers write, and the schedules
stream, which only workers and operators write (see :mod:`jsworker._wire.names`):

* a delayed job a producer enqueued (``later``) becomes an ``@at`` schedule the worker makes
  from its subject, so that no producer ever writes a schedule;
* a job a schedule fired goes into its queue, after the worker claimed its firing (see
  :mod:`.claims`): the claim's holder travels with the job, and a job runs as fired only while
  the claim still names it, so a producer cannot pass a job of its own off as a firing.

Both moves are idempotent: each message written carries a dedup key, and a claim already held
by the same fired message is taken as the worker's own. A message that cannot move yet (the
server did not answer) is given back and moved again a second later, by this worker or
another; nothing is lost while no worker runs, it waits in its stream. Messages move in
batches of what has arrived, each batch's writes sent together (:func:`store_each`): a burst
of firings costs the server's round trips once per batch, not once per job.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._core.layout import FIRED_CONSUMER, LATER_CONSUMER
from .._deadletters.format import dead_letter_message
from .._errors import JsworkerError, RefusedError, WriteRefused
from .._observability.logging import get_logger
from .._observability.metrics import UNKNOWN
from .._wire.headers import (
    EXPECTED_LAST_SUBJECT_SEQ,
    FIRED_BY,
    FIRED_CLAIM,
    FIRED_NEXT,
    MSG_ID,
    SCHEDULE_NEXT,
    SCHEDULE_TARGET,
    SCHEDULER,
    TASK,
    UNIQUE,
)
from ..jetstream.consume import ConsumeError, PullConsumer
from ..jetstream.message import OutMessage, Stored
from ..jetstream.pipeline import store_each
from ..jetstream.stored import WRONG_LAST_SEQUENCE, write
from .claims import CANCELLED, CLAIM_MARK, claim
from .delayed import schedule_message
from .firing import Firing, firing
from .markers import MarkerSweep, marker_message, remove_markers

if TYPE_CHECKING:
    from .._core.view import AppView
    from ..jetstream.connection import Connection
    from ..jetstream.delivery import Delivery

log = get_logger("jsworker.schedules")

# The most messages moved in one batch.
_BATCH = 256
# Seconds before a message that could not move is offered again: soon when the server did not
# answer, later when it refused (a full stream, permissions being fixed).
_RETRY = 1.0
_REFUSED = 30.0

#: What a batch's move says of each message: moved (or found to need no move, acknowledged),
#: or to be offered again after that many seconds.
Moved = bool | float
MoveBatch = Callable[[Sequence["Delivery"]], Awaitable[list[Moved]]]


class Relay:
    """Moves the messages of one consumer, a batch of what has arrived at a time, with
    ``move``; each is acknowledged once moved, given back for a retry when not."""

    def __init__(self, conn: Connection, stream: str, consumer: str, move: MoveBatch) -> None:
        self.conn, self.stream, self.consumer, self.move = conn, stream, consumer, move

    async def run(self) -> None:
        """Move messages for as long as the worker runs; a consumer that went away (a server
        restarted without its store) is pulled again once it is back."""
        while True:
            try:
                async with PullConsumer(self.conn, self.stream, self.consumer, max_messages=_BATCH) as pull:
                    while (first := await pull.next()) is not None:
                        batch = [first]
                        while len(batch) < _BATCH and (more := await pull.take()) is not None:
                            batch.append(more)
                        await self._move(batch)
            except ConsumeError as exc:
                log.warning("relay.stopped", consumer=self.consumer, error=str(exc))
            await asyncio.sleep(_RETRY)

    async def _move(self, batch: list[Delivery]) -> None:
        try:
            done = await self.move(batch)
        except JsworkerError as exc:
            log.warning("relay.retry", consumer=self.consumer, messages=len(batch), error=str(exc))
            done = [_REFUSED if isinstance(exc, WriteRefused) and not exc.transient else _RETRY] * len(batch)
        except Exception:
            # A bug here must not stop the moves: these messages are offered again, later.
            log.exception("relay.failed", consumer=self.consumer, messages=len(batch))
            done = [_REFUSED] * len(batch)
        for delivery, moved in zip(batch, done, strict=True):
            if moved is True:
                delivery.ack_soon()
            else:
                await delivery.nak(_RETRY if moved is False else moved)


def relays(app: AppView, conn: Connection) -> list[Callable[[], Awaitable[None]]]:
    """The two moves a worker runs on a server with schedules (services of the worker), and
    for an app with unique tasks the sweep of the markers they leave behind."""
    ns = app.namespace
    later = Relay(conn, ns.stream, LATER_CONSUMER, lambda batch: schedule_delayed(app, conn, batch))
    fired = Relay(conn, ns.schedules_stream, FIRED_CONSUMER, FiredJobsMove(app, conn).move)
    if not any(task.unique for task in app.tasks.values()):
        return [later.run, fired.run]
    return [later.run, fired.run, MarkerSweep(app, conn).run]


async def schedule_delayed(app: AppView, conn: Connection, batch: Sequence[Delivery]) -> list[Moved]:
    """Make each delayed job enqueued in ``batch`` a schedule in the schedules stream.

    A unique job whose id is already scheduled is dropped (the producer's own check only saw
    the job stream); a message that is no delayed job is dead-lettered with the reason."""
    ns = app.namespace
    done: list[Moved] = [True] * len(batch)
    schedules: list[tuple[int, OutMessage]] = []
    markers: list[tuple[int, OutMessage]] = []
    for i, delivery in enumerate(batch):
        try:
            schedule = schedule_message(ns, delivery.subject, delivery.body, delivery.headers)
        except ValueError as exc:
            await _dead_letter(app, conn, delivery, str(exc))
            continue
        schedules.append((i, schedule))
        if UNIQUE in schedule.headers:
            queue, due, job_id = ns.parse_delayed_subject(schedule.subject) or ("", 0, "")
            task = ns.parse_job_subject(ns.unfired_subject(schedule.headers[SCHEDULE_TARGET]))
            markers.append((i, marker_message(ns, queue, task[1] if task else "", job_id, due)))
    answers = await store_each(conn, [msg for _, msg in schedules + markers])
    for (i, msg), answer in zip(schedules + markers, answers, strict=True):
        if _moved_on(answer):
            # The job's id is scheduled already (a unique job, or this very message moved
            # before its acknowledgement was lost).
            log.info("delayed.already_scheduled", job_id=msg.headers[MSG_ID])
        elif not isinstance(answer, Stored) and done[i] is True:
            done[i] = _retry(answer)
    return done


class FiredJobsMove:
    """Moves the jobs schedules fired into their queues, once per firing.

    Each firing is claimed first; a second copy of it (the server fired one schedule twice) or
    one cancelled as it fired finds the claim taken and is dropped here, counted. A claim's
    holder is the fired message's sequence and a random part of this process's."""

    def __init__(self, app: AppView, conn: Connection) -> None:
        self.app, self.conn = app, conn
        self._nonce = secrets.token_hex(8)

    async def move(self, batch: Sequence[Delivery]) -> list[Moved]:
        """Claim and move each of ``batch``; what became of each."""
        ns = self.app.namespace
        done: list[Moved] = [True] * len(batch)
        prepared: list[_Fired] = []
        for i, delivery in enumerate(batch):
            try:
                subject = ns.unfired_subject(delivery.subject)
            except ValueError:
                await _dead_letter(self.app, self.conn, delivery, "fired onto a subject that is no queue's")
                continue
            headers = {k: v for k, v in delivery.headers.items() if not k.lower().startswith("nats-")}
            # The server's marks go under names a stream without schedules takes.
            headers[FIRED_BY] = delivery.headers.get(SCHEDULER, "")
            headers[FIRED_NEXT] = delivery.headers.get(SCHEDULE_NEXT, "")
            found = firing(headers)
            subject = _spread(self.app, subject, found, headers)
            # Without an identity it is claimed by nobody: the worker that takes it refuses it.
            holder = f"{delivery.stream_seq}.{self._nonce}" if found is not None else ""
            prepared.append(_Fired(i, subject, headers, found, holder))
        claiming = [f for f in prepared if f.found is not None]
        answers = await store_each(self.conn, [self._claim_message(f) for f in claiming])
        for fired, answer in zip(claiming, answers, strict=True):
            if not isinstance(answer, Stored):
                fired.holder, done[fired.index] = await self._contested(batch[fired.index], fired, answer)
        moving = [f for f in prepared if done[f.index] is True and (f.holder or f.found is None)]
        answers = await store_each(self.conn, [self._job_message(batch[f.index], f) for f in moving])
        for fired, answer in zip(moving, answers, strict=True):
            if not isinstance(answer, Stored):
                done[fired.index] = _retry(answer)
            elif fired.found is not None and UNIQUE in fired.headers:
                # In its queue, the job holds its key itself: the schedule's marker goes (moved
                # again, this message would remove it again; see marker_message).
                await remove_markers(self.conn, self.app.namespace, fired.found.job_id)
        return done

    def _claim_message(self, fired: _Fired) -> OutMessage:
        assert fired.found is not None
        subject = self.app.namespace.claim_subject(fired.found.job_id, fired.found.due_ms)
        return OutMessage(subject, fired.holder.encode(), {CLAIM_MARK: "1", EXPECTED_LAST_SUBJECT_SEQ: "0"})

    def _job_message(self, delivery: Delivery, fired: _Fired) -> OutMessage:
        headers = {**fired.headers, FIRED_CLAIM: fired.holder}
        headers[MSG_ID] = f"fired-{fired.holder or delivery.stream_seq}"
        return OutMessage(fired.subject, delivery.body, headers)

    async def _contested(
        self, delivery: Delivery, fired: _Fired, answer: Stored | RefusedError | None
    ) -> tuple[str, Moved]:
        """A claim the batch could not write: the holder to move the job with ("" when it is
        not to move) and what became of it."""
        if not _moved_on(answer):
            return "", _retry(answer)
        assert fired.found is not None
        # Another message on the claim's subject: this one's own claim (a retry), another copy's,
        # a cancel's, or none at all (read and settled one by one; see claim()).
        held = await claim(
            self.conn, self.app.namespace, fired.found.job_id, fired.found.due_ms, fired.holder
        )
        if held is not None and held.split(".", 1)[0] != str(delivery.stream_seq):
            _dropped(
                self.app,
                fired.subject,
                delivery.stream_seq,
                "cancelled" if held == CANCELLED else "duplicate",
            )
            return "", True
        return held or fired.holder, True


@dataclass(slots=True)
class _Fired:
    """A fired message on its way: its place in the batch, the job subject it goes to, the
    headers it goes with, its firing's identity and its claim's holder."""

    index: int
    subject: str
    headers: dict[str, str]
    found: Firing | None
    holder: str


def _spread(app: AppView, subject: str, found: Firing | None, headers: Mapping[str, str]) -> str:
    """Job subject ``subject`` (of partition 0) in the partition of its job: a unique job's
    stays in partition 0 (see :meth:`~jsworker._wire.names.Namespace.unique_filter`); any
    other goes by the id it ends in (a delayed job's), else by the firing's (a tick's own)."""
    parsed = app.namespace.parse_job_subject(subject)
    keyed = subject.count(".") == 5
    if keyed and (UNIQUE in headers or (found is not None and found.kind == "periodic")):
        return subject  # a unique job's (a delayed one's, a unique task's tick): partition 0
    job_id = subject.rsplit(".", 1)[1] if keyed else found.job_id if found else None
    if parsed is None or job_id is None:
        return subject
    return app.namespace.to_partition(subject, app.job_partition(parsed[0], job_id))


def _moved_on(answer: Stored | RefusedError | None) -> bool:
    """Whether ``answer`` refused a write because its subject held another message."""
    return isinstance(answer, RefusedError) and answer.err_code in WRONG_LAST_SEQUENCE


def _retry(answer: Stored | RefusedError | None) -> float:
    """Seconds before a message whose write got ``answer`` (not stored) is offered again."""
    return _REFUSED if isinstance(answer, RefusedError) and not answer.no_stream else _RETRY


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
