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
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from jsworker import App  # noqa: E402
from jsworker.server import NatsServer  # noqa: E402

import tasks  # noqa: E402


async def queues_empty(app: App) -> bool:
    conn = await app.producer.connection()
    for queue in app.queues:
        info = await conn.js.consumer_info(app.namespace.stream, queue)
        if info.num_pending or info.num_ack_pending:
            return False
    return True


async def enqueue_and_wait() -> None:
    await tasks.app.provision()  # streams and queue consumers, as the worker also does
    jobs = [
        await tasks.resize_image.adelay("cat.png", 640),
        await tasks.resize_image.adelay("dog.png", 1280),
        await tasks.flaky_report.adelay("2026-11-22"),
    ]
    jobs += tasks.send_email.delay_many([("ada@example.com", "hello"), {"to": "bob@example.com", "subject": "hi"}])
    for job in jobs:
        print(f"enqueued {job.task:<13} job {job.id} (stream seq {job.seq})")
    deadline = time.monotonic() + 30
    while not await queues_empty(tasks.app):
        if time.monotonic() > deadline:
            raise SystemExit("jobs did not finish within 30 s")
        await asyncio.sleep(0.2)
    print(f"all {len(jobs)} jobs done; queues {', '.join(tasks.app.queues)} are empty")
    await tasks.app.aclose()


def main() -> None:
    with NatsServer() as server:
        print(f"nats-server with JetStream at {server.url}")
        env = dict(os.environ, JSWORKER_URL=server.url)
        tasks.app.servers = [server.url]
        worker = subprocess.Popen(
            [sys.executable, "-m", "jsworker", "run", "tasks", "--concurrency", "10"], cwd=HERE, env=env
        )
        try:
            asyncio.run(enqueue_and_wait())
        finally:
            tasks.app.close()
            worker.send_signal(signal.SIGTERM)
            code = worker.wait(30)
        print(f"worker stopped (exit code {code})")
    if code != 0:
        raise SystemExit(code)


if __name__ == "__main__":
    main()
