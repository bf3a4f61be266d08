"""Questions over plain request-reply: one process asks, the app's workers answer.

A user that may not read the job stream or cancel on its own (a producer, a canceller) asks
the workers instead; a worker that cancelled a job asks the others whether one of them holds
it. Nothing here is stored: who may ask is decided by the server's permissions on the
question's subject.

Who is answered is decided here: a question's reply subject is the asker's to choose, and the
answer is published with the answerer's permissions. An answer published on another app's
claim, lease or record subject would be a write the asker may not make itself, so a question
is answered (and acted on) only when its reply subject lies in the asking app's inbox space,
which only that app's users may subscribe to.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import nats.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from .connection import Connection

#: What a question's handler returns: the answer, or None for no answer at all.
Handler = Callable[[str, bytes], Awaitable[bytes | None]]

_NO_RESPONDERS = "503"


class NobodyAnswered(Exception):
    """No process listens on the question's subject (no worker runs)."""


async def ask(conn: Connection, subject: str, body: bytes, timeout: float) -> bytes:
    """The first answer to ``body`` on ``subject``; :class:`NobodyAnswered` when nobody
    listens, ``TimeoutError`` when nobody answered within ``timeout`` seconds."""
    try:
        msg = await conn.nc.request(subject, body, timeout=timeout)
    except nats.errors.NoRespondersError:
        raise NobodyAnswered(subject) from None
    except nats.errors.TimeoutError:
        raise TimeoutError(f"no answer on {subject} within {timeout:g}s") from None
    return bytes(msg.data)


async def gather(conn: Connection, subject: str, body: bytes, *, wait: float, linger: float) -> list[bytes]:
    """Every answer to ``body`` on ``subject`` from all listeners: collected until ``linger``
    seconds after the first one, or ``wait`` seconds when none comes; at once when nobody
    listens."""
    inbox = conn.nc.new_inbox()
    answers: list[bytes] = []
    first = asyncio.Event()
    nobody = False

    async def on_answer(msg: Msg) -> None:
        nonlocal nobody
        if msg.headers and msg.headers.get("Status") == _NO_RESPONDERS:
            nobody = True
        else:
            answers.append(bytes(msg.data))
        first.set()

    sub = await conn.nc.subscribe(inbox, cb=on_answer)
    try:
        await conn.nc.publish(subject, body, reply=inbox)
        deadline = time.monotonic() + wait
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(first.wait(), wait)
        if answers and not nobody:
            await asyncio.sleep(max(0.0, min(linger, deadline - time.monotonic())))
    finally:
        with contextlib.suppress(nats.errors.Error):
            await sub.unsubscribe()
    return answers


class Serving:
    """Questions being answered on one subject; :meth:`close` stops taking new ones and waits
    for the answers under way. A question with a reply subject outside ``replies_under.`` is
    dropped unhandled, and ``refused`` hears its subject and reply subject."""

    def __init__(
        self, conn: Connection, handler: Handler, replies_under: str, refused: Callable[[str, str], None]
    ) -> None:
        self._conn = conn
        self._handler = handler
        self._inbox_space = replies_under + "."
        self._refused = refused
        self._answering: set[asyncio.Task[None]] = set()
        self._sub: Subscription | None = None

    async def start(self, subject: str, group: str) -> None:
        """Subscribe to ``subject`` (in queue group ``group`` when not empty)."""
        self._sub = await self._conn.nc.subscribe(subject, queue=group, cb=self._on_question)

    async def _on_question(self, msg: Msg) -> None:
        # A question without a reply subject (a notice) is acted on and answers nobody.
        if msg.reply and not msg.reply.startswith(self._inbox_space):
            self._refused(msg.subject, msg.reply)
            return
        # The client runs a subscription's callbacks one after another, and a question may
        # wait on the server: one must not hold up the next.
        task = asyncio.get_running_loop().create_task(self._answer(msg))
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)

    async def _answer(self, msg: Msg) -> None:
        reply = await self._handler(msg.subject, bytes(msg.data))
        if reply is not None and msg.reply:
            with contextlib.suppress(nats.errors.Error):
                await self._conn.nc.publish(msg.reply, reply)

    async def close(self) -> None:
        """Take no more questions; wait for the answers under way (a worker stopping must not
        leave a cancel it carries out half done, or its asker without an answer)."""
        if self._sub is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._sub.unsubscribe()
            self._sub = None
        if self._answering:
            await asyncio.gather(*self._answering, return_exceptions=True)


async def serve(
    conn: Connection,
    subject: str,
    handler: Handler,
    *,
    replies_under: str,
    refused: Callable[[str, str], None],
    group: str = "",
) -> Serving:
    """Answer questions on ``subject`` (wildcards allowed) with ``handler``, each in a task of
    its own; with ``group``, each question goes to one member of the group only. Only
    questions whose reply subject is under ``replies_under`` (the app's inbox space), or that
    have none, are handled; ``refused`` hears the subject and reply subject of every other one."""
    serving = Serving(conn, handler, replies_under, refused)
    await serving.start(subject, group)
    return serving
