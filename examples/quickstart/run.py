"""Quickstart: an embedded nats-server, a worker process, a few jobs, all done.

    python examples/quickstart/run.py

Starts nats-server with JetStream on a free loopback port (as ``jsworker dev`` does), runs
``jsworker run tasks`` in a subprocess, enqueues a few jobs, waits until the queues are
empty, then stops both.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import tasks  # noqa: E402

from jsworker import App, Job  # noqa: E402
from jsworker.events import COLUMNS, EVENT_KINDS, read_event_rows  # noqa: E402
from jsworker.testing import NatsServer  # noqa: E402


async def queues_empty(app: App) -> bool:
    conn = await app.producer.connection()
    for queue in app.queues:
        info = await conn.js.consumer_info(app.namespace.stream, queue)
        if info.num_pending or info.num_ack_pending:
            return False
    return True


def enqueue_from_sync_code() -> list[Job]:
    """What a Django view or a script does: plain calls, no event loop."""
    return [
        tasks.send_email.delay("ada@example.com", "hello"),
        *tasks.send_email.delay_many(
            [("bob@example.com", "hi"), {"to": "eve@example.com", "subject": "hey"}]
        ),
    ]


async def enqueue_from_async_code_and_wait(jobs: list[Job]) -> None:
    """What a FastAPI handler does; then wait until the worker has done everything."""
    await tasks.app.provision()  # the queue consumers, in case the worker has not made them yet
    jobs += [
        await tasks.resize_image.adelay("cat.png", 640),
        await tasks.resize_image.adelay("dog.png", 1280),
        await tasks.flaky_report.adelay("2026-11-22"),
    ]
    for job in jobs:
        print(f"enqueued {job.task:<13} job {job.id} (stream seq {job.seq})")
    deadline = time.monotonic() + 30
    while not await queues_empty(tasks.app):
        if time.monotonic() > deadline:
            raise SystemExit("jobs did not finish within 30 s")
        await asyncio.sleep(0.2)
    print(f"all {len(jobs)} jobs done; queues {', '.join(tasks.app.queues)} are empty")
    await asyncio.sleep(0.2)  # events are not acknowledged: let the last ones be stored
    print(f"job events: {await event_counts(tasks.app)}")
    await tasks.app.aclose()


async def event_counts(app: App) -> str:
    """How many job events of each kind the app's events stream holds."""
    counts: Counter[str] = Counter()
    conn = await app.producer.connection()
    column = [name for name, _ in COLUMNS].index("event")
    async for chunk in read_event_rows(conn, app.namespace):
        counts.update(row[column] for row in chunk.rows)
    return ", ".join(f"{counts[kind]} {kind}" for kind in EVENT_KINDS if counts[kind])


def main() -> None:
    with NatsServer() as server:
        print(f"nats-server with JetStream at {server.url}")
        env = dict(os.environ, JSWORKER_URL=server.url)
        tasks.app.servers = [server.url]
        worker = subprocess.Popen(
            [sys.executable, "-m", "jsworker", "run", "tasks", "--concurrency", "10"], cwd=HERE, env=env
        )
        try:
            asyncio.run(enqueue_from_async_code_and_wait(enqueue_from_sync_code()))
        finally:
            tasks.app.close()
            worker.send_signal(signal.SIGTERM)
            code = worker.wait(30)
        print(f"worker stopped (exit code {code})")
    if code != 0:
        raise SystemExit(code)


if __name__ == "__main__":
    main()
