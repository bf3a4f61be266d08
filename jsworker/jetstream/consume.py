"""A continuous pull consumer: ``consume(max_messages=N)`` on top of nats-py's core API.

nats-py only offers ``fetch``, which blocks between batches. This loop keeps pull requests
outstanding while the caller works, the way the Go and JavaScript clients' ``Consume`` do:

* one inbox subscription, fed straight from the client's read loop
  (:meth:`~jsworker.jetstream.client.JetStreamClient.subscribe_direct`); pull requests
  ``{batch, expires, idle_heartbeat}`` sent with that inbox as reply subject;
* ``pending`` counts messages requested and not yet handed to the caller (buffered ones
  included), so what this loop holds never exceeds its bound (``max_messages``): a buffered
  message's ``ack_wait`` clock is already running on the server;
* when ``pending`` falls below ``threshold`` (half by default) the gap is requested;
* with ``grow_to``, the bound follows the pace: it holds about ``AHEAD`` seconds of what the
  caller took lately, between ``max_messages`` and ``grow_to``. The worker's read loop only
  runs between the jobs it started, so at tens of thousands of jobs a second a fixed 100 left
  it waiting for the next batch (bench processing: 52k -> 60k no-op jobs/s with the bound at
  500). Requests above ``max_messages`` expire within ``BURST_EXPIRES``, so a loop that was
  fast holds no large request on an idle queue for long: the next jobs may be slow ones,
  which other workers should share;
* status messages close requests (408, 409 with ``Nats-Pending-Messages``), void them (409
  Leadership Change / Exceeded MaxWaiting), or end the loop (consumer deleted, bad request);
* a ``503`` (no consumer leader yet, during an election) sets one retry deadline that both the
  refill and the watchdog respect, so an election does not become a storm of requests;
* the server drops pull requests silently when it restarts, so a watchdog re-pulls when
  nothing at all (not even a heartbeat) arrived for 2 x ``idle_heartbeat`` while a request was
  outstanding; after a reconnect it re-pulls at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from .._errors import ConsumeError as ConsumeError
from .api import api_subject
from .connection import Connection
from .delivery import Delivery, VerbBatcher
from .denials import Denial

_NS = 1_000_000_000
#: Seconds of hand-outs a growing bound holds.
AHEAD = 0.020
#: Seconds a request above ``max_messages`` waits on the server.
BURST_EXPIRES = 1.0
# The pace is measured over at least this many seconds.
_PACE_WINDOW = 0.05
# 409 descriptions that a new request cannot fix.
_TERMINAL_409 = ("consumer deleted", "consumer is push based", "exceeded maxrequest")


class EngineEvent(enum.Enum):
    """What the pull loop reports to its observer."""

    PULL = "pull"  # a pull request was sent
    HEARTBEAT = "heartbeat"  # the server's idle heartbeat arrived
    MISSED_HEARTBEATS = "missed_heartbeats"  # silence for 2 x idle_heartbeat: re-pulled
    RECONNECT = "reconnect"  # the connection came back: re-pulled
    STATUS = "status"  # any other status message (detail has code and description)
    VOIDED = "requests_voided"  # a status that voids the pull requests (a leadership change): re-pulled
    NO_RESPONDERS = "no_responders"  # 503: no consumer leader; backing off
    DROPPED = "dropped"  # buffered messages forgotten: the server may hand them out again
    ERROR = "error"  # the loop stopped, or the watchdog hit an unexpected error


EventHook = Callable[[EngineEvent, str], None]


def _ignore(event: EngineEvent, detail: str) -> None:
    return None


class PullConsumer:
    """Continuous pull from one durable consumer; hands out :class:`Delivery` objects.

    Use as ``async with PullConsumer(...) as pc:`` and call ``await pc.next()`` (``None`` once
    the loop is closed or drained). A ``handler`` may also take messages
    as they arrive: it is called with each one that finds the buffer empty, and returning
    True means it took the message (as :meth:`take` would have handed it out); False buffers it.
    With a ``limit`` it hands out at most that many messages and never requests more, so a
    caller that will stop after N jobs is not left holding messages it can only give back.
    """

    def __init__(
        self,
        conn: Connection,
        stream: str,
        consumer: str,
        *,
        max_messages: int = 100,
        expires: float = 30.0,
        idle_heartbeat: float | None = None,
        threshold: int | None = None,
        retry_delay: float = 0.5,
        missing_after: float = 15.0,
        on_event: EventHook | None = None,
        handler: Callable[[Delivery], bool] | None = None,
        limit: int | None = None,
        grow_to: int | None = None,
        forget_after: float | None = None,
        on_forgotten: Callable[[list[Delivery]], None] | None = None,
    ) -> None:
        if max_messages < 1:
            raise ValueError("max_messages must be >= 1")
        self.conn = conn
        self.stream = stream
        self.consumer = consumer
        self.max_messages = max_messages
        self.expires = expires
        self.idle_heartbeat = idle_heartbeat if idle_heartbeat is not None else min(expires / 2, 30.0)
        if not 0 < self.idle_heartbeat <= expires / 2:
            raise ValueError("idle_heartbeat must be > 0 and <= expires / 2")
        self.threshold = threshold if threshold is not None else (max_messages + 1) // 2
        # Seconds without a heartbeat for the buffer (beat()) after which what it holds may
        # have been handed out again by the server: forgotten then (None: never).
        self._forget_after = forget_after
        self._beat_at = time.monotonic()
        # After a pause, the round trip that proves what the socket held has been read: until
        # it returns, arrivals were (or may have been) sent during the pause and are forgotten.
        self._fence: asyncio.Task[None] | None = None
        # Top-ups sent by take_now, each from a task of its own.
        self._topping_up: set[asyncio.Task[None]] = set()
        self._fenced: list[Delivery] = []
        # Told of the messages forgotten (their next delivery is no fault of the job's).
        self._on_forgotten = on_forgotten
        #: What this loop may hold now (requested and not handed out): ``max_messages``, or
        #: up to ``grow_to`` while the caller takes messages fast.
        self.bound = max_messages
        self.grow_to = grow_to if grow_to is not None and grow_to > max_messages else None
        self._half = threshold is None
        self._taken = 0  # hand-outs since _pace_since
        self._pace_since = 0.0
        self.retry_delay = retry_delay
        self.missing_after = missing_after
        self.on_event = on_event or _ignore
        self.handler = handler
        #: Messages this loop may still hand out in all (None: no end): it never asks for more.
        self.left = limit
        self.stats: dict[str, int] = {e.value: 0 for e in EngineEvent}

        self._verbs = VerbBatcher(conn.nc)
        self._subject = api_subject("CONSUMER.MSG.NEXT", stream, consumer)
        self._inbox = ""
        self._sub: Any = None
        self._watchdog: asyncio.Task[None] | None = None
        self._unhook: Callable[[], None] | None = None
        self._unhook_lost: Callable[[], None] | None = None
        self._unlisten: Callable[[], None] | None = None
        self._buffer: deque[Delivery] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._pending = 0
        self._last_rx = 0.0
        self._retry_at = 0.0
        self._unanswered_since: float | None = None
        self._pulling = False
        # Arrivals after stop_pulling(), for requests sent before; kept until the inbox closes.
        self._late: list[Delivery] = []
        self._inbox_closed = False
        self._closed = False
        self._error: ConsumeError | None = None

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> PullConsumer:
        """Subscribe to the inbox and send the first pull request."""
        nc = self.conn.nc
        self._inbox = nc.new_inbox()
        self._sub = await nc.subscribe_direct(self._inbox, self._on_msg)
        self._unhook = self.conn.on_reconnect(self._on_reconnect)
        self._unhook_lost = self.conn.on_disconnect(self._on_disconnect)
        self._unlisten = nc.denials.listen(self._on_denied)
        self._pulling = True
        self._pace_since = time.monotonic()
        await self._pull(self.bound)
        self._watchdog = asyncio.create_task(self._watch(), name=f"jsworker-watchdog-{self.consumer}")
        return self

    def stop_pulling(self) -> None:
        """Send no more pull requests from now on (without waiting for anything): what is
        buffered is still handed out, after which :meth:`wait` returns False. Messages that
        still arrive for the requests sent before are kept aside until the inbox is closed
        (:meth:`finish` hands them out, :meth:`drain` returns them)."""
        self._pulling = False
        self._pending = len(self._buffer)
        self._wake()

    async def finish(self) -> None:
        """:meth:`stop_pulling`, close the inbox, and hand out what arrived meanwhile.

        The inbox is unsubscribed, which makes the server drop our waiting pull requests:
        left open, they would keep receiving new jobs that we could only give back, each
        round trip costing the job a delivery attempt. Messages that arrive after the inbox
        is closed are given back at once (``nak``) so other workers get them without waiting
        for ``ack_wait``.
        """
        await self._close_inbox()
        # Requested before the stop, within any limit: they are handed out like the rest.
        self._buffer.extend(self._late)
        self._pending += len(self._late)
        self._late.clear()
        self._wake()

    async def drain(self) -> list[Delivery]:
        """:meth:`finish`, but return what is buffered (not yet handed out) instead, with
        what arrived until the inbox was closed."""
        # Taken before the wait for the inbox, so that no caller starts them meanwhile.
        left = list(self._buffer)
        self._buffer.clear()
        await self._close_inbox()
        left.extend(self._late)
        self._late.clear()
        return left

    async def _close_inbox(self) -> None:
        self.stop_pulling()
        if self._sub is not None and not self.conn.is_closed:
            sub, self._sub = self._sub, None
            with contextlib.suppress(Exception):
                # Unsubscribes, then a round trip: every message the server sent before it
                # has been through _on_msg when this returns.
                await sub.drain()
        self._inbox_closed = True

    async def close(self) -> None:
        """Stop for good: unsubscribe and wake any waiting :meth:`next`."""
        if self._closed:
            return
        self._closed = True
        self._pulling = False
        for unhook in (self._unhook, self._unhook_lost, self._unlisten):
            if unhook is not None:
                with contextlib.suppress(ValueError):
                    unhook()
        for topping_up in list(self._topping_up):
            topping_up.cancel()
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        if self._fence is not None:
            # Awaited, not cancelled: nats-py answers a cancelled PING's PONG with an error in
            # its read loop. The round trip ends within its timeout.
            with contextlib.suppress(Exception):
                await self._fence
        await self._verbs.flush()
        if self._sub is not None and not self.conn.is_closed:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
        self._wake()

    async def __aenter__(self) -> PullConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- handing out ----------------------------------------------------------------------

    async def next(self, timeout: float | None = None) -> Delivery | None:
        """The next message; ``None`` when closed/drained or when ``timeout`` passed.

        Raises :class:`ConsumeError` when the loop stopped because of the server.
        """
        if await self.wait(timeout):
            return await self.take()
        return None

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until a message is buffered: True then; False when closed/drained or timed out.

        Lets a caller with a scarce resource (a worker slot) wait for work *before* taking the
        resource, so an idle queue never holds a slot that another queue could use.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._buffer:
            if self._error is not None:
                raise self._error
            if self._closed or not self._pulling:
                return False
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                if remaining is None:
                    await self._waiter  # the common case: no wait_for wrapper task per wait
                else:
                    await asyncio.wait_for(self._waiter, remaining)
            except TimeoutError:
                return False
            finally:
                self._waiter = None
        return True

    async def take(self) -> Delivery | None:
        """Hand out the oldest buffered message (None if there is none) and top up."""
        delivery = self._popped()
        if delivery is not None and self._counted_out():
            await self._refill()
        return delivery

    def take_now(self) -> Delivery | None:
        """:meth:`take` for a caller that may not wait: a top-up that is due is sent from a
        task of its own."""
        delivery = self._popped()
        # One top-up task at a time: a caller taking many in one go would start one for each
        # take until the first runs, and the first asks for all that is missing by then.
        if delivery is not None and self._counted_out() and not self._topping_up:
            topping_up = asyncio.ensure_future(self._refill())
            self._topping_up.add(topping_up)
            topping_up.add_done_callback(self._topped_up)
        return delivery

    def _popped(self) -> Delivery | None:
        if self._forget_after is not None and time.monotonic() - self._beat_at > self._forget_after:
            self._forget_unbeaten()
        return self._buffer.popleft() if self._buffer else None

    def _topped_up(self, task: asyncio.Task[None]) -> None:
        self._topping_up.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            # Its requests are counted as sent: the watchdog, hearing nothing back for them,
            # pulls again.
            self._count(EngineEvent.ERROR, f"top-up not sent: {exc!r}")

    def buffered(self) -> tuple[Delivery, ...]:
        """Messages received and not yet handed out (their ack timers are running)."""
        return tuple(self._buffer)

    def beat(self) -> tuple[Delivery, ...]:
        """The buffered messages, to be told to the server as in progress now. When the last
        beat was too long ago (the process paused), they are forgotten instead (none is
        returned): the server may have handed them out again, and a word on one of them would
        stretch another worker's timer."""
        if self._forget_after is not None and time.monotonic() - self._beat_at > self._forget_after:
            self._forget_unbeaten()
        self._beat_at = time.monotonic()
        return tuple(self._buffer)

    def _forget_unbeaten(self) -> None:
        paused = time.monotonic() - self._beat_at
        self._beat_at = time.monotonic()
        self.forget_buffered(f"no heartbeat for {paused:.1f}s")
        # What the server sent while the process stood still may still be in the socket, and
        # the read loop hands it to _on_msg after this check has passed: a heartbeat task that
        # wakes first would let it through. Everything read before the answer to one PING
        # was sent before the server had it, so it is forgotten too.
        if self._fence is None:
            self._fence = asyncio.create_task(self._lift_fence(paused))

    async def _lift_fence(self, paused: float) -> None:
        # A failed round trip (disconnected) ends the fence too: the disconnect forgets the
        # buffer again, and what comes after the reconnect was sent after it.
        with contextlib.suppress(Exception):
            await self.conn.nc.flush(timeout=max(int(self._forget_after or 0), 1))
        fenced, self._fenced, self._fence = self._fenced, [], None
        if fenced:
            self._count(EngineEvent.DROPPED, f"{len(fenced)} arrived after a pause of {paused:.1f}s")
            self._forgotten(fenced)
        if not self._closed:
            await self._refill()

    def forget_buffered(self, why: str) -> int:
        """Forget the messages received and not yet handed out, without a word to the server
        (``why`` is reported): their ack timers may have run out unseen (the connection lost,
        the process paused), so the server may have handed them to another worker already.
        Given back (``nak``), one the server had handed out again would be delivered a third
        time; forgotten, each comes back once its timer runs out, unless it was already.
        Returns how many were forgotten."""
        forgotten = list(self._buffer)
        if forgotten:
            self._buffer.clear()
            self._pending = max(0, self._pending - len(forgotten))
            self._count(EngineEvent.DROPPED, f"{len(forgotten)} buffered: {why}")
            self._forgotten(forgotten)
        return len(forgotten)

    def _forgotten(self, deliveries: list[Delivery]) -> None:
        if self._on_forgotten is not None:
            self._on_forgotten(deliveries)

    @property
    def pending(self) -> int:
        """Messages requested from the server and not yet handed out."""
        return self._pending

    # -- pull requests --------------------------------------------------------------------

    async def _pull(self, batch: int) -> None:
        if self.left is not None:
            batch = min(batch, self.left - self._pending)
        if batch <= 0:
            return
        if self.bound > self.max_messages:
            request = {"batch": batch, "expires": int(BURST_EXPIRES * _NS)}
        else:
            request = {
                "batch": batch,
                "expires": int(self.expires * _NS),
                "idle_heartbeat": int(self.idle_heartbeat * _NS),
            }
        self._pending += batch
        # A fresh request deserves 2 x idle_heartbeat to show life before the watchdog acts.
        self._last_rx = time.monotonic()
        self._count(EngineEvent.PULL, str(batch))
        await self.conn.nc.publish(self._subject, json.dumps(request).encode(), reply=self._inbox)

    def _counted_out(self) -> bool:
        """Counts one message handed out to the caller, from the buffer or on arrival; whether
        a top-up (:meth:`_refill`) is due."""
        self._pending -= 1
        self._taken += 1
        if self.left is not None:
            self.left -= 1
        return self._pending < self.threshold

    async def _refill(self) -> None:
        if (
            self._pulling
            and self._pending < self.threshold
            and self.conn.is_connected
            and time.monotonic() >= self._retry_at
        ):
            if self.grow_to is not None:
                self._pace(self.grow_to)
            await self._pull(self.bound - self._pending)

    def _pace(self, most: int) -> None:
        """Set the bound to ``AHEAD`` seconds of the hand-outs since the last look (at most
        ``most``)."""
        now = time.monotonic()
        elapsed = now - self._pace_since
        if elapsed < _PACE_WINDOW:
            return
        self.bound = max(self.max_messages, min(most, int(self._taken / elapsed * AHEAD)))
        if self._half:
            self.threshold = (self.bound + 1) // 2
        self._taken = 0
        self._pace_since = now

    def _void_requests(self) -> None:
        """Outstanding requests are gone on the server: only the local buffer still counts."""
        self._pending = len(self._buffer)

    # -- inbound --------------------------------------------------------------------------

    def _on_msg(
        self, subject: str, reply: str, body: bytes, headers: dict[str, str] | None
    ) -> Awaitable[None] | None:
        # Called by the read loop for each message; most need nothing awaited (a coroutine per
        # message shows in a short job's cost), the others return what to await.
        now = self._last_rx = time.monotonic()
        if not reply and headers and "Status" in headers:
            return self._on_status(headers)
        self._unanswered_since = None
        if self._forget_after is not None and (
            self._fence is not None or now - self._beat_at > self._forget_after
        ):
            if self._fence is None:
                self._forget_unbeaten()
            # Sent before the pause ended: its ack timer may have run out unseen.
            self._pending = max(0, self._pending - 1)
            self._fenced.append(Delivery(self._verbs, subject, reply, body, headers))
            return None
        delivery = Delivery(self._verbs, subject, reply, body, headers)
        if not self._pulling:
            if not (self._inbox_closed or self._closed):
                # Answer to a request sent before the stop: the caller decides what becomes of
                # it (run it, or give it back counted) once the inbox is closed.
                self._late.append(delivery)
                return None
            return self._give_back(delivery)
        if not self._buffer and self.handler is not None and self.handler(delivery):
            # Taken on arrival: the caller had room, so no buffer round and no wake-up.
            return self._refill() if self._counted_out() else None
        self._buffer.append(delivery)
        self._wake()
        return None

    async def _give_back(self, delivery: Delivery) -> None:
        await delivery.nak()
        await self._verbs.flush()

    async def _on_status(self, headers: dict[str, str]) -> None:
        code = headers.get("Status", "")
        if code != "503":
            self._unanswered_since = None  # any other answer means the consumer is there
        if code == "100":
            self._count(EngineEvent.HEARTBEAT, "")
            return
        description = (headers.get("Description") or "").strip()
        detail = f"{code} {description}".strip()
        left = headers.get("Nats-Pending-Messages")
        if code == "503":
            now = time.monotonic()
            self._void_requests()
            self._retry_at = now + self.retry_delay
            self._count(EngineEvent.NO_RESPONDERS, detail)
            if self._unanswered_since is None:
                self._unanswered_since = now
            elif now - self._unanswered_since > self.missing_after:
                # Longer than any election: the consumer is gone (deleted while we were
                # disconnected, so no 409 told us). Stop, so the owner can re-create it.
                self._stop_with(f"no consumer has answered for {self.missing_after:g}s: {detail}")
            return  # the watchdog re-pulls once retry_delay has passed
        terminal = code == "400" or (code == "409" and description.lower().startswith(_TERMINAL_409))
        # A status that voids the requests (a leader's change) is told apart from the routine
        # ones (a request that expired): an operator sees the pull loop react to a failover.
        self._count(EngineEvent.VOIDED if left is None and not terminal else EngineEvent.STATUS, detail)
        if left is not None:
            # 408 expired / 409 batch completed / server shutdown: that much will not come.
            try:
                self._pending = max(len(self._buffer), self._pending - int(left))
            except ValueError:
                self._void_requests()
        elif terminal:
            self._stop_with(detail)
            return
        else:
            # Leadership change, exceeded max waiting, pin mismatch: requests are void.
            self._void_requests()
        await self._refill()

    async def _on_disconnect(self) -> None:
        # Not started while the server cannot be told (their acks would be lost with it), nor
        # after: by then the server may have handed them to another worker.
        self.forget_buffered("the connection was lost")

    async def _on_reconnect(self) -> None:
        if not self._pulling:
            return
        self._void_requests()
        self._count(EngineEvent.RECONNECT, "")
        self._retry_at = 0.0
        await self._refill_all()

    async def _refill_all(self) -> None:
        if self._pulling and self.conn.is_connected:
            await self._pull(self.bound - self._pending)

    async def _watch(self) -> None:
        tick = min(self.idle_heartbeat / 2, self.retry_delay)
        while not self._closed:
            await asyncio.sleep(tick)
            try:
                if not self._pulling or not self.conn.is_connected:
                    continue
                now = time.monotonic()
                if now < self._retry_at:
                    continue
                outstanding = self._pending - len(self._buffer)
                if outstanding > 0 and now - self._last_rx > 2 * self.idle_heartbeat:
                    self._void_requests()
                    self._count(EngineEvent.MISSED_HEARTBEATS, f"{now - self._last_rx:.1f}s silent")
                    await self._refill_all()
                else:
                    # Covers refills skipped while disconnected or backing off after a 503.
                    await self._refill()
            except Exception as exc:  # the watchdog must outlive any single failure
                self._count(EngineEvent.ERROR, f"watchdog: {exc!r}")

    # -- helpers --------------------------------------------------------------------------

    def _on_denied(self, denial: Denial) -> None:
        # Without the permission to pull or to receive, nothing would ever arrive: say so.
        for subject in (self._subject, self._inbox):
            if denial.refuses(subject):
                self._stop_with(str(denial.error(subject)))

    def _stop_with(self, detail: str) -> None:
        self._error = ConsumeError(f"pull from {self.stream}/{self.consumer} stopped: {detail}")
        self._count(EngineEvent.ERROR, detail)
        self._pulling = False
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _count(self, event: EngineEvent, detail: str) -> None:
        self.stats[event.value] += 1
        self.on_event(event, detail)
