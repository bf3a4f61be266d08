"""Plain subscriptions whose callbacks see a message's subject and body, nothing of the client.

Code outside this package (the result waiters) subscribes through :func:`listen` so that it
never handles nats-py's message objects.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from nats.aio.msg import Msg

from .connection import Connection

#: What a subscription calls with each message: its subject and its body.
OnMessage = Callable[[str, bytes], Awaitable[None]]


async def listen(conn: Connection, subject: str, on_message: OnMessage) -> None:
    """Subscribe to ``subject`` (wildcards allowed) for the life of ``conn``: ``on_message`` is
    awaited with each message's subject and body, one message at a time, in the order they
    arrive. After a reconnect the client subscribes again before it sends anything else."""

    async def deliver(msg: Msg) -> None:
        await on_message(msg.subject, msg.data)

    await conn.nc.subscribe(subject, cb=deliver)
