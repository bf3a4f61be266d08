"""Putting job events straight into an app's events stream, for the export and reader tests."""

from __future__ import annotations

import asyncio
import time

import nats

from jsworker import App
from jsworker.events import JobEvent, encode_event
from jsworker.jetstream.connection import Connection

from .support import wait_until


async def store_events(app: App, bodies: list[bytes | JobEvent]) -> list[int]:
    """Create the app's streams, then store each body (an event, or raw bytes that are not
    one) in its events stream; their stream sequences."""
    conn = await Connection.open(app.connect_options("operator", "test"))
    try:
        await app.provision_streams(conn)
    finally:
        await conn.close()
    nc = await nats.connect(app.servers[0])
    js = nc.jetstream()
    seqs = []
    try:
        for body in bodies:
            if isinstance(body, JobEvent):
                subject = app.namespace.event_subject(body.queue, body.task, body.event)
                body = encode_event(body)
            else:
                subject = app.namespace.event_subject("default", "mail", "started")
            seqs.append((await js.publish(subject, body)).seq)
    finally:
        await nc.close()
    return seqs


async def _stored_at(app: App, seq: int) -> float:
    nc = await nats.connect(app.servers[0])
    try:
        msg = await nc.jetstream().get_msg(app.namespace.events_stream, seq)
    finally:
        await nc.close()
    assert msg.time is not None
    return msg.time.timestamp()


def moment_after(app: App, seq: int) -> float:
    """A time (unix seconds) after event ``seq`` was stored and before anything stored from now
    on: a time window bound that separates the two. Storage times are the server's clock, the
    same clock as ours on this machine, so the wait below is for that clock to move past it."""
    moment = asyncio.run(_stored_at(app, seq)) + 0.001
    wait_until(
        time.time, until=lambda now: now > moment, interval=0.001, message=f"the clock to pass {moment}"
    )
    return moment
