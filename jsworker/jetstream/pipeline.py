"""Storing many messages with a bounded number of acknowledgements outstanding.

Each message is a core publish whose reply subject is ``<inbox>.<n>``, and one wildcard
subscription on the inbox takes the server's acknowledgements. The client's own JetStream
publish costs a future, a timer and a task per message, which is where a bulk enqueue's CPU
otherwise goes; this pipeline stores about twice as many messages per second.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import nats.errors

from .._errors import PermissionDeniedError
from .._errors import RefusedError as RefusedError
from .._errors import StalledError as StalledError
from .._wire.headers import MSG_ID
from .api import UNAVAILABLE, ApiError, parse_reply
from .client import HeadedMessage
from .connection import Connection
from .denials import Denial
from .message import OutMessage, Stored, check_size, headers_of, stored_from

StoredHook = Callable[[OutMessage, Stored], Awaitable[None]]
# Messages sent in one write by publish_all: the server answers the first ones while the
# rest are on their way.
_BATCH = 256


class AckPipeline:
    """Publishes messages with up to ``window`` acknowledgements outstanding.

    :meth:`publish` returns the message's number (0, 1, ...) once there is room in the window;
    :meth:`wait` waits for every acknowledgement. ``results`` maps numbers to what the server
    said (:class:`Stored`) or why it refused (:class:`RefusedError`); ``on_stored`` is awaited
    for every message stored. When nothing is acknowledged for ``timeout`` seconds, or the
    connection drops with messages unanswered (their answers are lost with it), both methods
    raise :class:`StalledError`; with ``stop_on_refusal`` they raise the first refusal too.
    Use as ``async with AckPipeline(conn) as pipe:``.
    """

    def __init__(
        self,
        conn: Connection,
        *,
        window: int = 1000,
        timeout: float = 5.0,
        stop_on_refusal: bool = False,
        on_stored: StoredHook | None = None,
    ) -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        self.conn = conn
        self.window = window
        self.timeout = timeout
        self.stop_on_refusal = stop_on_refusal
        self.on_stored = on_stored
        self.results: dict[int, Stored | RefusedError] = {}
        self.created = 0
        self.duplicates = 0
        self._prefix = ""
        self._sub: Any = None
        self._next = 0
        self._pending: dict[str, tuple[int, OutMessage]] = {}
        self._room = asyncio.Event()
        self._wake_at = -1
        self._refusal: RefusedError | None = None
        self._denied: PermissionDeniedError | None = None
        self._unlisten: Callable[[], None] | None = None
        self._unhook_lost: Callable[[], None] | None = None
        self._lost = False

    async def __aenter__(self) -> AckPipeline:
        inbox = self.conn.nc.new_inbox()
        self._prefix = f"{inbox}."
        self._unlisten = self.conn.nc.denials.listen(self._on_denied)
        self._unhook_lost = self.conn.on_disconnect(self._on_lost)
        # Straight from the read loop: no message object, queue and task hop per answer.
        self._sub = await self.conn.nc.subscribe_direct(f"{inbox}.*", self._on_ack)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._unlisten is not None:
            self._unlisten()
        if self._unhook_lost is not None:
            self._unhook_lost()
        if self._sub is not None and not self.conn.is_closed:
            # A connection closed meanwhile has no subscription left to remove.
            with contextlib.suppress(nats.errors.Error):
                await self._sub.unsubscribe()

    @property
    def outstanding(self) -> int:
        """Messages published and not acknowledged yet."""
        return len(self._pending)

    async def publish(self, msg: OutMessage, *, checked: bool = False) -> int:
        """Send ``msg`` once the window has room; its number. ``checked``: its size was
        checked against ``max_payload`` already."""
        if len(self._pending) >= self.window:
            await self._wait_until(self.window // 2)
        self._raise_refusal()
        if not checked:
            check_size(msg, self.conn.max_payload)
        number = self._next
        self._next += 1
        token = str(number)
        self._pending[token] = (number, msg)
        await self.conn.nc.publish(msg.subject, msg.body, reply=self._prefix + token, headers=headers_of(msg))
        return number

    async def publish_all(self, msgs: Sequence[OutMessage]) -> None:
        """Send every message of ``msgs`` (checked against ``max_payload`` already), numbered
        in order from the next number, as room in the window allows: many to one write."""
        # Sent once at least half the window is free: few large writes, never a busy loop.
        enough = max(1, self.window // 2)
        sent = 0
        while sent < len(msgs):
            room = self.window - len(self._pending)
            if room < enough:
                await self._wait_until(self.window - enough)
                continue
            self._raise_refusal()
            chunk = msgs[sent : sent + min(room, _BATCH)]
            wire: list[HeadedMessage] = []
            for msg in chunk:
                token = str(self._next)
                self._pending[token] = (self._next, msg)
                self._next += 1
                wire.append((msg.subject, self._prefix + token, msg.headers, msg.body))
            await self.conn.nc.publish_headed_many(wire, shared=False)
            sent += len(chunk)

    async def wait(self) -> None:
        """Wait until every message published so far is acknowledged (or refused)."""
        await self._wait_until(0)

    async def _wait_until(self, outstanding: int) -> None:
        while len(self._pending) > outstanding:
            self._raise_refusal()
            if self._lost:
                raise self._stalled("unanswered when the connection was lost")
            self._wake_at = outstanding
            self._room.clear()
            try:
                await asyncio.wait_for(self._room.wait(), self.timeout)
            except TimeoutError:
                raise self._stalled(f"not acknowledged within {self.timeout:g}s") from None
            finally:
                self._wake_at = -1
        self._raise_refusal()

    def _stalled(self, why: str) -> StalledError:
        first = next(iter(self._pending.values()))[1]
        return StalledError(
            f"{len(self._pending)} messages {why} (the first is job {first.headers.get(MSG_ID)}); "
            "they may be stored, and publishing them again with the same ids cannot duplicate them"
        )

    async def _on_lost(self) -> None:
        # The server answers a publish on the connection it came by: what was outstanding
        # when that connection dropped is never answered, and waiting out the timeout for it
        # stalled every caller (a relay's next moves, a bulk enqueue) by that much.
        if self._pending:
            self._lost = True
            self._room.set()

    def _raise_refusal(self) -> None:
        if self._denied is not None:
            raise self._denied
        if self.stop_on_refusal and self._refusal is not None:
            raise self._refusal

    def _on_denied(self, denial: Denial) -> None:
        # The server refused our acknowledgement inbox or a subject we published to: nothing
        # outstanding will be answered, so waiting for the timeout would only hide why.
        refused = self._prefix + "*"
        if not denial.refuses(refused):
            refused = next((m.subject for _, m in self._pending.values() if denial.refuses(m.subject)), "")
        if refused:
            self._denied = denial.error(refused)
            self._room.set()

    def _on_ack(
        self, subject: str, reply: str, data: bytes, headers: dict[str, str] | None
    ) -> Awaitable[None] | None:
        found = self._pending.pop(subject[len(self._prefix) :], None)
        if found is None:
            return None  # not ours, or answered twice
        number, msg = found
        result = _result(data, headers, msg)
        self.results[number] = result
        stored: Awaitable[None] | None = None
        if isinstance(result, RefusedError):
            if self._refusal is None:
                self._refusal = result
        else:
            if result.duplicate:
                self.duplicates += 1
            else:
                self.created += 1
            if self.on_stored is not None:
                stored = self.on_stored(msg, result)
        if len(self._pending) <= self._wake_at or (self.stop_on_refusal and self._refusal is not None):
            self._room.set()
        return stored


def _result(data: bytes, headers: dict[str, str] | None, msg: OutMessage) -> Stored | RefusedError:
    try:
        return stored_from(parse_reply(data, headers))
    except ApiError as exc:
        if exc.failure.code == UNAVAILABLE:
            return RefusedError(f"no stream accepts subject {msg.subject}", no_stream=True)
        if exc.failure.code:
            why = f"server rejected job {msg.headers.get(MSG_ID)}: {exc.failure.text}"
            return RefusedError(why, err_code=exc.failure.err_code)
        return RefusedError(f"unreadable acknowledgement for job {msg.headers.get(MSG_ID)}: {exc}")
    except ValueError as exc:
        return RefusedError(f"unreadable acknowledgement for job {msg.headers.get(MSG_ID)}: {exc}")


async def store_each(
    conn: Connection, msgs: Sequence[OutMessage], timeout: float = 5.0
) -> list[Stored | RefusedError | None]:
    """Store ``msgs`` with every acknowledgement outstanding at once: for each, what the
    server said, or None when it did not answer within ``timeout`` (it may be stored). One
    refused refuses none of the others."""
    if not msgs:
        return []
    async with AckPipeline(conn, window=len(msgs), timeout=timeout) as pipe:
        for msg in msgs:
            await pipe.publish(msg)
        with contextlib.suppress(StalledError):
            await pipe.wait()
    return [pipe.results.get(number) for number in range(len(msgs))]
