"""Driver-side JetStream helpers: provisioning, purging, counting, jsworker-shaped raw messages.

Raw baselines publish messages shaped like jsworker's (same stream, same body and header
set, a unique ``Nats-Msg-Id`` so the server does the same dedup work), so a ratio measures
what the framework adds on the client side, not a difference in the messages.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import nats
from apps import bench_app
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from jsworker.admin import Admin

try:
    from jsworker._core.layout import consumer_spec
except ImportError:  # a --before tree from before the package's layout of 2026-12
    from jsworker.layout import consumer_spec  # type: ignore[import-not-found,no-redef]

STREAM = bench_app.app.namespace.stream
RAW_QUEUE = bench_app.RAW_QUEUE
RAW_SUBJECT = bench_app.app.namespace.job_subject(RAW_QUEUE, "noop")


def subject_of(task: object) -> str:
    """The subject jsworker publishes jobs of ``task`` to."""
    return bench_app.app.namespace.job_subject(task.queue, task.name)  # type: ignore[attr-defined]


def raw_body(i: int) -> bytes:
    """The body jsworker sends for a call with one int argument."""
    return json.dumps({"args": [i], "kwargs": {}}, separators=(",", ":")).encode()


def raw_headers(task: str = "noop") -> dict[str, str]:
    """The headers jsworker sends with a job, stamped now."""
    return {
        "Nats-Msg-Id": uuid.uuid4().hex,
        "Jsw-Task": task,
        "Jsw-Enqueued-At": str(time.time_ns()),
        "Content-Type": "application/json",
    }


async def connect(url: str) -> Client:
    """A plain nats-py connection for the driver."""
    return await nats.connect(url, connect_timeout=5, max_reconnect_attempts=3)


async def provision(url: str) -> None:
    """Create the bench app's streams and consumers, and the raw baselines' consumer."""
    bench_app.app.servers = [url]
    await bench_app.app.provision()
    await bench_app.app.aclose()
    nc = await connect(url)
    try:
        spec = consumer_spec(bench_app.app, bench_app.app.defaults.queue)
        await nc.jetstream().add_consumer(
            STREAM,
            ConsumerConfig(
                durable_name=RAW_QUEUE,
                filter_subject=bench_app.app.namespace.queue_filter(RAW_QUEUE),
                ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.ALL,
                ack_wait=spec.ack_wait,
                max_deliver=-1,
                max_ack_pending=spec.max_ack_pending,
            ),
        )
    finally:
        await nc.close()


async def purge(url: str) -> None:
    """Empty the job stream, so a figure starts from a fresh stream state."""
    nc = await connect(url)
    try:
        await nc.jetstream().purge_stream(STREAM)
    finally:
        await nc.close()


async def message_count(url: str) -> int:
    """Messages stored in the job stream."""
    nc = await connect(url)
    try:
        return int((await nc.jetstream().stream_info(STREAM)).state.messages)
    finally:
        await nc.close()


async def hold(url: str, queue: str, paused: bool) -> None:
    """Pause the bench app's ``queue`` (its workers' pulls wait on the server, which hands out
    nothing) or resume it."""
    bench_app.app.servers = [url]
    try:
        async with Admin(bench_app.app) as admin:
            await (admin.pause_queue(queue) if paused else admin.resume_queue(queue))
    finally:
        await bench_app.app.aclose()


async def wait_workers(url: str, workers: int, timeout: float) -> bool:
    """Wait (bounded) until ``workers`` worker processes run: the worker registry lists them.
    False when they did not within ``timeout`` seconds."""
    bench_app.app.servers = [url]
    try:
        async with Admin(bench_app.app) as admin:
            deadline = time.monotonic() + timeout
            while len(await admin.workers()) < workers:
                if time.monotonic() >= deadline:
                    return False
                await asyncio.sleep(0.05)
            return True
    finally:
        await bench_app.app.aclose()


async def wait_empty(url: str, timeout: float) -> int:
    """Wait (bounded) until the job stream is empty: every job acked; messages left."""
    nc = await connect(url)
    try:
        js = nc.jetstream()
        deadline = time.monotonic() + timeout
        left = int((await js.stream_info(STREAM)).state.messages)
        while left and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            left = int((await js.stream_info(STREAM)).state.messages)
        return left
    finally:
        await nc.close()


async def publish_raw(url: str, n: int, subject: str = RAW_SUBJECT, window: int = 1000) -> None:
    """Pre-enqueue ``n`` jsworker-shaped messages with raw ``publish_async`` (not timed)."""
    nc = await connect(url)
    try:
        js = nc.jetstream(publish_async_max_pending=window)
        for i in range(n):
            await js.publish_async(subject, raw_body(i), headers=raw_headers())
            if i % window == window - 1:
                await js.publish_async_completed()
        await js.publish_async_completed()
    finally:
        await nc.close()
