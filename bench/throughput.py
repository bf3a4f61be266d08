"""Processing throughput: N pre-enqueued no-op jobs through one ``jsworker run`` process,
next to raw nats-py consume+ack on the same server in the same run.

    python bench/throughput.py [--jobs 20000] [--concurrency 100]

Prints one table row and one JSON line per figure. Absolute numbers drift between runs and
machines; compare the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nats
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StreamConfig

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import noop_app  # noqa: E402

from jsworker.server import NatsServer  # noqa: E402


async def raw_fetch(url: str, n: int, batch: int = 100) -> float:
    """Raw nats-py: publish n messages, then a fetch(batch) loop with ack(); msgs/s of the consume."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="RAW", subjects=["raw.>"], retention=RetentionPolicy.WORK_QUEUE))
    for i in range(n):
        await js.publish_async("raw.q", b'{"args":[%d],"kwargs":{}}' % i)
    await js.publish_async_completed()
    sub = await js.pull_subscribe(
        "raw.q", durable="raw", config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT)
    )
    got = 0
    start = time.perf_counter()
    while got < n:
        for msg in await sub.fetch(batch, timeout=5):
            await msg.ack()
            got += 1
    elapsed = time.perf_counter() - start
    await nc.close()
    return n / elapsed


async def pending(url: str, stream: str) -> int:
    nc = await nats.connect(url)
    try:
        return int((await nc.jetstream().stream_info(stream)).state.messages)
    finally:
        await nc.close()


async def enqueue(url: str, n: int, sync: bool) -> None:
    noop_app.app.servers = [url]
    task = noop_app.noop_sync if sync else noop_app.noop_async
    await task.adelay_many([(i,) for i in range(n)])
    await noop_app.app.aclose()


def jsworker_rate(url: str, n: int, concurrency: int, sync: bool) -> float:
    """Jobs/s of one worker process draining n pre-enqueued no-op jobs."""
    asyncio.run(enqueue(url, n, sync))
    env = dict(os.environ, JSWORKER_URL=url, PYTHONPATH=str(HERE))
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jsworker",
            "run",
            "noop_app",
            "-c",
            str(concurrency),
            "--log-level",
            "warning",
        ],
        env=env,
    )
    try:
        first = last = None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            left = asyncio.run(pending(url, "JSW_BENCH"))
            now = time.perf_counter()
            if first is None and left < n:
                first = now
            if left == 0:
                last = now
                break
            time.sleep(0.02)
        if first is None or last is None:
            raise SystemExit("jobs were not drained in time")
        # The first poll that saw progress came up to one interval late: count it back.
        return n / (last - first + 0.02)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=100)
    args = parser.parse_args()
    with NatsServer() as server:
        raw = asyncio.run(raw_fetch(server.url, args.jobs))
        rows = [("raw nats-py fetch(100)+ack", raw, None)]
        for label, sync in (("jsworker async no-op", False), ("jsworker sync no-op", True)):
            rate = jsworker_rate(server.url, args.jobs, args.concurrency, sync)
            rows.append((label, rate, rate / raw))
    print(f"{'figure':<30} {'jobs/s':>10} {'vs raw':>8}")
    for label, rate, ratio in rows:
        print(f"{label:<30} {rate:>10.0f} {'' if ratio is None else f'{ratio:.2f}':>8}")
    for label, rate, ratio in rows:
        print(json.dumps({"figure": label, "jobs": args.jobs, "per_s": round(rate), "ratio_vs_raw": ratio}))


if __name__ == "__main__":
    main()
