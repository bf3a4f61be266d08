"""The acknowledgement pipeline's window with answers that trickle in one at a time, as on a
loaded machine: a bulk send goes on as room frees up and never spins without yielding."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from jsworker.jetstream.message import OutMessage, Stored
from jsworker.jetstream.pipeline import AckPipeline

pytestmark = pytest.mark.anyio


class _Denials:
    def listen(self, callback: Callable[..., None]) -> Callable[[], None]:
        return lambda: None


class _Client:
    """Stands in for the client: every message sent is answered by the server one event-loop
    turn after the one before (the server's answers are the server's part, faked here only
    in their timing)."""

    def __init__(self) -> None:
        self.denials = _Denials()
        self.handler: Callable[..., Any] | None = None
        self.seq = 0
        self.writes: list[int] = []
        self.waiting: deque[str] = deque()
        self.answering = False

    def new_inbox(self) -> str:
        return "_INBOX.t"

    async def subscribe_direct(self, subject: str, handler: Callable[..., Any]) -> Any:
        self.handler = handler
        return None

    async def publish_headed_many(
        self, wire: list[tuple[str, str, Any, bytes]], *, shared: bool = True
    ) -> None:
        self.writes.append(len(wire))
        self.waiting.extend(reply for _, reply, _, _ in wire)
        if not self.answering:
            self.answering = True
            asyncio.get_running_loop().call_soon(self._answer)

    def _answer(self) -> None:
        # One answer a turn, in the order the messages were sent.
        assert self.handler is not None
        self.seq += 1
        self.handler(self.waiting.popleft(), "", json.dumps({"stream": "S", "seq": self.seq}).encode(), None)
        if self.waiting:
            asyncio.get_running_loop().call_soon(self._answer)
        else:
            self.answering = False


class _Conn:
    def __init__(self) -> None:
        self.nc = _Client()
        self.is_closed = False
        self.max_payload = 1 << 20

    def on_disconnect(self, listener: Callable[[], Awaitable[None]]) -> Callable[[], None]:
        return lambda: None  # this connection never drops


@pytest.mark.parametrize("window", [1, 2, 10, 1000])
async def test_answers_one_at_a_time_let_the_send_go_on(window: int) -> None:
    conn = _Conn()
    msgs = [OutMessage(f"s.{i}", b"x", {"Nats-Msg-Id": str(i)}) for i in range(3000)]
    with anyio.fail_after(10):
        async with AckPipeline(conn, window=window) as pipe:  # type: ignore[arg-type]
            await pipe.publish_all(msgs)
            await pipe.wait()
    assert [pipe.results[n] for n in range(len(msgs))] == [Stored(i + 1, False) for i in range(len(msgs))]
    assert max(conn.nc.writes) <= min(window, 256)
    # Sent as room freed up by half a window at least, not a message at a time.
    assert len(conn.nc.writes) <= 2 * len(msgs) // max(1, window // 2) + 1
