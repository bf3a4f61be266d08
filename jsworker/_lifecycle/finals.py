"""Final-state handlers (``@app.on_final_state``): each job's final state, heard at least once.

With ``App(final_states=True)`` every job has a record in the jobs bucket before the server
hears that it ended: a worker stores it before its ack or its dead letter's term, a cancel
before it answers. The bucket is a stream only workers and operators write (see
:mod:`jsworker._core.permissions`), so a record is what one of them stored, never a
producer's word.

Each handler reads that stream through a durable consumer of its own
(:func:`~jsworker._core.layout.final_state_spec`), made by the provisioning step; every worker
process of the app pulls from it, so the handler runs wherever workers run, and a fleet that
restarts goes on from the first record not yet acknowledged. A record is acknowledged once
its handler returned; one whose handler raised comes back later. Records of states a job
leaves again (retrying, snoozed) are passed over.

The bucket keeps one record a job: a handler that falls behind sees a job's latest state
only, and records older than their ``result_ttl`` are gone unheard.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable
from typing import TYPE_CHECKING, cast

from .._core.hooks import FinalStateHandler
from .._core.layout import final_state_spec
from .._errors import ConsumeError, SerializationError
from .._observability.logging import get_logger
from ..jetstream.consume import PullConsumer
from .state import JobRecord

if TYPE_CHECKING:
    from .._core.view import AppView
    from ..jetstream.connection import Connection
    from ..jetstream.delivery import Delivery

log = get_logger("jsworker.final_states")

# Records a worker holds for one handler at a time: it calls the handler one record after
# another, and records it holds are no other worker's to take meanwhile.
_HELD = 16
# Seconds before a record whose handler raised is offered again, doubling up to the most.
_FIRST_RETRY = 1.0
_MOST_RETRY = 60.0
# Seconds before pulling again after the consumer went away (a server restarted without it).
_REPULL = 1.0


class FinalStates:
    """Hands the records of the jobs bucket to one final-state handler, for as long as the
    worker runs."""

    def __init__(self, app: AppView, conn: Connection, name: str, handler: FinalStateHandler) -> None:
        self.app, self.conn, self.name = app, conn, name
        self.handler = handler
        # A sync handler (a Django ORM write, say) runs in a thread, off the worker's loop.
        self._threaded = not inspect.iscoroutinefunction(handler)
        self._spec = final_state_spec(app, name)
        self._prefix = app.namespace.record_subject("")  # + job id: its record's subject
        self._pull: PullConsumer | None = None
        self._in_hand: Delivery | None = None

    async def run(self) -> None:
        """Hand out records until the worker stops."""
        spec = self._spec
        beating = asyncio.create_task(self._beat(spec.ack_wait / 3))
        try:
            while True:
                try:
                    async with PullConsumer(self.conn, spec.stream, spec.name, max_messages=_HELD) as pull:
                        self._pull = pull
                        while (delivery := await pull.next()) is not None:
                            self._in_hand = delivery
                            await self.hand(delivery)
                            self._in_hand = None
                except ConsumeError as exc:
                    log.warning("final_states.stopped", handler=self.name, error=str(exc))
                await asyncio.sleep(_REPULL)
        finally:
            beating.cancel()

    async def _beat(self, every: float) -> None:
        """Keep the record in hand and those waiting behind it while a handler runs (a slow
        database write): no other worker is handed them meanwhile."""
        while True:
            await asyncio.sleep(every)
            held = [] if self._pull is None else list(self._pull.buffered())
            if self._in_hand is not None:
                held.append(self._in_hand)
            for delivery in held:
                if not delivery.settled:
                    # Best effort: on a connection going down, the server hands them out again.
                    with contextlib.suppress(Exception):
                        await delivery.in_progress()

    async def hand(self, delivery: Delivery) -> None:
        """Call the handler with the final state ``delivery`` records, then acknowledge it;
        a record of no final state is acknowledged at once."""
        job_id = delivery.subject[len(self._prefix) :]
        try:
            record = JobRecord.decode(delivery.body) if delivery.body else None
        except SerializationError:
            record = None  # not a record a worker wrote: nothing a handler could read
        if record is None or not record.state.finished:
            delivery.ack_soon()
            return
        try:
            status = record.status(job_id)
            if self._threaded:
                await asyncio.to_thread(self.handler, status)
            else:
                await cast(Awaitable[None], self.handler(status))
        except Exception:
            # The record comes back later: a handler's database may be failing over.
            log.exception("final_states.handler_failed", handler=self.name, job_id=job_id)
            await delivery.nak(min(_MOST_RETRY, _FIRST_RETRY * 2 ** (delivery.attempt - 1)))
            return
        delivery.ack_soon()
