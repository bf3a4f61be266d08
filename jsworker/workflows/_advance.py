"""The worker's part of a workflow: when a step ends, record it and enqueue what comes next,
exactly once, before the server is told the step is done.

A chain's step that succeeded enqueues the next step (its result first in the arguments) in
one atomic batch with the state write that records it; the state write expects the state the
worker read, and the next job's id derives from the workflow's, so a redelivered step (its
worker died before the ack) finds the batch refused and enqueues nothing. A group's member
stores its result once under ``jsw.<app>.flow.done.<id>.<member>``, then adds one to the
group's tally (a server-side counter: no read, no retry, however many members end at once).
The member that brings the tally to the group's size checks that every result is stored and
enqueues the callback, with every result, in one atomic batch with the state write that
records it. A step that failed for good (dead-lettered), was cancelled or expired ends
the workflow the same way, with the error callback when there is one.

Only a workflow's own jobs advance it (see :mod:`.trust`): :meth:`Continuations.forged` says
why a job is not the step it claims to be, before it runs, and a job found so advances nothing.

Doing this before the ack means a worker that dies in between runs the step again (as any job
whose worker died); it never loses the continuation.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._errors import JobNotFound, JsworkerError, SerializationError
from .._observability.logging import get_logger
from .._wire.headers import EXPECTED_LAST_SUBJECT_SEQ, caller_headers
from ..jetstream.atomic import BatchConflict, publish_atomic
from ..jetstream.counter import increment
from ..jetstream.limits_stream import LimitsStream
from ..jetstream.message import OutMessage
from ..jetstream.stored import SubjectMoved, write
from ._build import step_message
from ._definition import (
    FLOW,
    FLOW_STEP,
    FlowDef,
    FlowState,
    def_subject,
    done_subject,
    read_result,
    read_state,
)
from ._errbacks import failure_details
from ._trust import forged_reason

if TYPE_CHECKING:
    from .._enqueue.task import TaskOwner
    from ..jetstream.connection import Connection

log = get_logger("jsworker.workflows")

# Definitions a worker keeps read (they never change): a chain's steps come back to it often.
_KEPT = 1024
# A group member's state write that lost to another member's tries again, this many times.
_TRIES = 200
# Pauses before the results of a group whose tally is whole are counted again (seconds).
_RECOUNT = (0.05, 0.2, 0.5, 1.0, 2.0)


class Continuations:
    """Advances the workflows whose steps this worker runs."""

    def __init__(
        self, app: TaskOwner, conn: Connection, forgery: Callable[[str], None] = lambda what: None
    ) -> None:
        self.app = app
        self.conn = conn
        #: Told of each forgery found: ``definition`` or ``step``.
        self.forgery = forgery
        self._stream = LimitsStream(conn, app.namespace.stream)
        self._defs: OrderedDict[str, tuple[FlowDef, int]] = OrderedDict()
        self._ttl = str(int(app.options.workflow_ttl))

    async def definition(self, flow_id: str) -> FlowDef | None:
        """The workflow's definition: the first message of its subject (a later one, which
        only a producer could have added, is never read)."""
        defined = await self._defined(flow_id)
        return defined[0] if defined is not None else None

    async def _defined(self, flow_id: str) -> tuple[FlowDef, int] | None:
        """The workflow's definition and its stream sequence, read once per worker (they
        never change)."""
        defined = self._defs.get(flow_id)
        if defined is not None:
            return defined
        subject = def_subject(self.app.namespace, flow_id)
        found = await self._stream.next(subject, 1)
        if found is None or not found.body:
            return None
        flow = FlowDef.decode(self.app.serializer, found.body)
        # Only a producer's publish outside a start can put a second message there.
        later = await self._stream.next(subject, found.seq + 1)
        if later is not None:
            log.warning("workflow.forged_definition", flow_id=flow_id, seq=later.seq, kept_seq=found.seq)
            self.forgery("definition")
        self._defs[flow_id] = defined = (flow, found.seq)
        while len(self._defs) > _KEPT:
            self._defs.popitem(last=False)
        return defined

    async def forged(self, headers: Mapping[str, str], job_id: str, seq: int, fired: bool) -> str | None:
        """Why the job with ``headers`` (stored at ``seq``; ``fired`` by a server schedule) is
        not the workflow step it claims to be, or None when it is, claims none, or its end
        advances nothing (its workflow unknown, or a callback). Raises JsworkerError when
        the server could not say."""
        flow_id = headers.get(FLOW)
        if flow_id is None:
            return None
        defined = await self._defined(flow_id)
        if defined is None:
            return None
        flow, def_seq = defined
        step = headers.get(FLOW_STEP, "")
        reason = await forged_reason(flow, def_seq, step, job_id, seq, fired, lambda: self.state(flow_id))
        if reason is not None:
            log.warning(
                "workflow.forged_step", flow_id=flow_id, step=step, job_id=job_id, seq=seq, reason=reason
            )
            self.forgery("step")
        return reason

    async def state(self, flow_id: str) -> FlowState:
        """The workflow's state now."""
        return await read_state(self._stream, self.app.namespace, flow_id)

    async def ended(
        self, headers: dict[str, str], succeeded: bool, value: Any, state: str, reason: str, error: Any
    ) -> None:
        """Advance the workflow of the step with ``headers`` (its message's), which ended:
        ``succeeded`` with ``value``, or for good as ``state`` (failed, cancelled, expired)
        for ``reason`` (``error``: the exception, if any). Raises JsworkerError when the
        server could not store it (the step is then retried)."""
        flow_id, step = headers.get(FLOW), headers.get(FLOW_STEP, "")
        if flow_id is None:
            return
        flow = await self.definition(flow_id)
        if flow is None:
            log.warning("workflow.unknown", flow_id=flow_id, step=step)
            return
        carried = caller_headers(headers)
        if step.startswith("m") and step[1:].isdigit() and flow.kind == "group":
            await self._member(flow, int(step[1:]), succeeded, value, state, reason, error, carried)
        elif step.isdigit() and flow.kind == "chain":
            await self._step(flow, int(step), succeeded, value, state, reason, error, carried)
        # The callbacks' own ends (cb, err) advance nothing.

    async def _step(
        self, flow: FlowDef, index: int, succeeded: bool, value: Any, state: str, reason: str, error: Any,
        carried: dict[str, str],
    ) -> None:  # fmt: skip
        now = await self.state(flow.id)
        if now.ended is not None or now.step > index:
            return  # recorded already: a redelivery of this step
        batch: list[OutMessage] = []
        if succeeded and index + 1 < len(flow.steps):
            try:
                batch.append(
                    step_message(self.app, flow.id, str(index + 1), flow.steps[index + 1], [value], carried)
                )
            except SerializationError as exc:
                succeeded, state, reason = (
                    False,
                    "failed",
                    f"step {index} returned what cannot be sent on: {exc}",
                )
            else:
                now.step = index + 1
        elif succeeded:
            now.ended, now.at = "succeeded", str(index)
            try:
                batch.append(self._done(flow, index, {"ok": value}))
            except Exception as exc:  # an encoder may raise anything on a foreign object
                succeeded, state, reason = (
                    False,
                    "failed",
                    f"step {index} returned what cannot be kept: {exc}",
                )
                batch = []
        if not succeeded:
            now.ended, now.at, now.reason = state, str(index), reason
            batch += self._on_error(flow, index, state, reason, error, carried)
        with contextlib.suppress(_Lost):  # another delivery of this step recorded it first
            await self._write(flow, now, batch)

    async def cancel(self, flow_id: str, reason: str) -> bool:
        """End workflow ``flow_id`` as cancelled, once: its state says so, so no step ending
        after it enqueues another and no callback runs (a cancel is no failure: the error
        callback does not run either). False when it had ended already; JobNotFound when there
        is no such workflow."""
        flow = await self.definition(flow_id)
        if flow is None:
            raise JobNotFound(f"no workflow {flow_id} (or it expired)")
        ended = False

        async def change(now: FlowState) -> list[OutMessage] | None:
            nonlocal ended
            ended = now.ended is None
            if not ended:
                return None
            now.ended, now.at, now.reason = "cancelled", None, reason
            return []

        await self._settle(flow, change)
        return ended

    async def _member(
        self, flow: FlowDef, index: int, succeeded: bool, value: Any, state: str, reason: str, error: Any,
        carried: dict[str, str],
    ) -> None:  # fmt: skip
        if succeeded:
            kept: dict[str, Any] = {"ok": value}
        elif flow.on_failure == "continue":
            kept = {
                "error": {"state": state, "reason": reason, "type": type(error).__name__ if error else None}
            }
        else:
            kept = {"ignored": True}
        try:
            body = self.app.serializer.dumps(kept)
        except Exception as exc:  # an encoder may raise anything on a foreign object
            succeeded, state, reason = False, "failed", f"member {index} returned what cannot be kept: {exc}"
            body = b""
        if not succeeded and flow.on_failure == "stop":
            await self._settle(
                flow, lambda now: self._stopped(flow, now, index, state, reason, error, carried)
            )
            return
        # The result first: the tally counts only members whose result is stored.
        first = await self._store_result(flow, index, body)
        ns, size = self.app.namespace, len(flow.steps)
        total = await increment(self.conn, ns.tally_subject(flow.id), dedup=f"{flow.id}-m{index}")
        if first and total is not None and total < size:
            return  # not the last one: no read of the results stored so far
        # Perhaps the last: the results stored decide (a tally counted twice, past the
        # duplicate window, cannot fire the callback early).
        if not await self._all_stored(flow, size, counted=total is not None and total >= size):
            return
        await self._settle(flow, lambda now: self._completed(flow, now, index, kept, carried))

    async def _all_stored(self, flow: FlowDef, size: int, *, counted: bool) -> bool:
        """Whether every member's result is stored. ``counted``: the tally says every member
        counted, and each stored its result before it counted; a count of results short of
        that comes from a stream leader elected a moment ago and still applying what was
        stored before, so it is read again (the member that makes the tally whole is the one
        that starts the callback: none after it would)."""
        subject = done_subject(self.app.namespace, flow.id)
        for pause in _RECOUNT:
            if await self._stream.count(subject) >= size:
                return True
            if not counted:
                return False
            await asyncio.sleep(pause)
        return await self._stream.count(subject) >= size

    async def _store_result(self, flow: FlowDef, index: int, body: bytes) -> bool:
        """Store member ``index``'s result once; False when an earlier delivery stored it
        (which may or may not have counted it). A message no worker wrote on its subject (see
        :func:`written_by_jsworker`) is no result: the result goes after it."""
        msg = self._done_message(flow, index, body)
        expect_last = 0
        for _ in range(3):
            try:
                await write(self.conn, msg.subject, msg.body, msg.headers, expect_last=expect_last)
                return True
            except SubjectMoved:
                if await read_result(self._stream, self.app.namespace, flow.id, index) is not None:
                    return False
                last = await self._stream.last(msg.subject)
                expect_last = last.seq if last is not None else 0
        raise JsworkerError(f"workflow {flow.id}: member {index}'s result could not be stored")

    async def _settle(
        self, flow: FlowDef, change: Callable[[FlowState], Awaitable[list[OutMessage] | None]]
    ) -> None:
        """Write the state ``change`` makes of the current one, with the messages it returns,
        reading again when another write came first; nothing when it returns None."""
        for _ in range(_TRIES):
            now = await self.state(flow.id)
            batch = await change(now)
            if batch is None:
                return
            try:
                await self._write(flow, now, batch)
                return
            except _Lost:
                # Spread out, so that writers that met do not meet again.
                await asyncio.sleep(random.random() * 0.01)
        raise JsworkerError(f"workflow {flow.id}: its state could not be written")

    async def _stopped(
        self, flow: FlowDef, now: FlowState, index: int, state: str, reason: str, error: Any,
        carried: dict[str, str],
    ) -> list[OutMessage] | None:  # fmt: skip
        """A member ended without a result under ``stop``: the group fails (once)."""
        if index in now.failed:
            return None
        now.failed = sorted({*now.failed, index})
        if now.ended is not None:
            return []
        now.ended, now.at, now.reason = state, f"m{index}", reason
        return self._on_error(flow, index, state, reason, error, carried)

    async def _completed(
        self, flow: FlowDef, now: FlowState, index: int, kept: dict[str, Any], carried: dict[str, str]
    ) -> list[OutMessage] | None:
        """Every member ended: the group succeeded, and its callbacks are enqueued (once): the
        chord's (a batch's ``on_complete``) with every result, and a batch's ``on_success``
        too when no member failed."""
        if now.ended is not None:
            return None
        now.ended, now.at = "succeeded", "cb" if flow.callback else None
        if flow.callback is None and flow.on_success is None:
            return []
        results, failed = await self._results(flow, index, kept)
        out = []
        if flow.callback is not None:
            out.append(step_message(self.app, flow.id, "cb", flow.callback, [results], carried))
        if flow.on_success is not None and not failed:
            out.append(step_message(self.app, flow.id, "ok", flow.on_success, [results], carried))
        return out

    async def _results(self, flow: FlowDef, index: int, own: dict[str, Any]) -> tuple[list[Any], bool]:
        """Every member's result in order (this member's from ``own``), as the callback gets
        them: an error's details in place of a result under ``continue``, nothing under
        ``ignore``; and whether a member failed."""

        async def read(i: int) -> dict[str, Any]:
            if i == index:
                return own
            found = await read_result(self._stream, self.app.namespace, flow.id, i)
            if found is None or not found.body:
                raise JsworkerError(f"workflow {flow.id}: member {i}'s result is gone")
            kept = self.app.serializer.loads(found.body)
            return kept if isinstance(kept, dict) else {"ignored": True}

        kept = await asyncio.gather(*(read(i) for i in range(len(flow.steps))))
        results = [k["ok"] if "ok" in k else k["error"] for k in kept if "ignored" not in k]
        return results, any("ok" not in k for k in kept)

    def _done(self, flow: FlowDef, index: int, kept: dict[str, Any]) -> OutMessage:
        return self._done_message(flow, index, self.app.serializer.dumps(kept))

    def _done_message(self, flow: FlowDef, index: int, body: bytes) -> OutMessage:
        """A step's result, stored once."""
        headers = {EXPECTED_LAST_SUBJECT_SEQ: "0", "Nats-TTL": self._ttl}
        return OutMessage(done_subject(self.app.namespace, flow.id, index), body, headers)

    def _on_error(
        self, flow: FlowDef, index: int, state: str, reason: str, error: Any, carried: dict[str, str]
    ) -> list[OutMessage]:
        if flow.on_error is None or state != "failed":
            return []
        details = failure_details(flow, index, reason, error if isinstance(error, BaseException) else None)
        return [step_message(self.app, flow.id, "err", flow.on_error, [details], carried)]

    async def _write(self, flow: FlowDef, state: FlowState, batch: list[OutMessage]) -> None:
        """Store the new state with ``batch``, all or none; :class:`_Lost` when another write
        came first."""
        # The jobs of the batch are recorded in it, so that each can be told from a forgery.
        wrote = [m.headers.get(FLOW_STEP, "") for m in batch]
        msg = state.message(self.app.namespace, flow.id, self.app.options.workflow_ttl, wrote)
        try:
            if batch:
                await publish_atomic(self.conn, [msg, *batch])
            else:
                # A state write alone needs no batch: the server holds few batches open at once.
                headers = {k: v for k, v in msg.headers.items() if k != EXPECTED_LAST_SUBJECT_SEQ}
                await write(self.conn, msg.subject, msg.body, headers, expect_last=state.seq)
        except (BatchConflict, SubjectMoved) as exc:
            raise _Lost(str(exc)) from exc


class _Lost(Exception):
    """A state write found the state changed since it was read."""
