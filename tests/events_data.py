"""Putting job events straight into an app's events stream, for the export and reader tests."""

from __future__ import annotations

import nats

from jsworker import App
from jsworker.events import JobEvent, encode_event
from jsworker.jetstream.connection import Connection


async def store_events(app: App, bodies: list[bytes | JobEvent]) -> list[int]:
    """Create the app's streams, then store each body (an event, or raw bytes that are not
    one) in its events stream; their stream sequences."""
    conn = await Connection.open(app.connect_options("test"))
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
