"""Raw nats-py consumer: the ceiling jsworker's worker is compared with.

    python bench/apps/raw_consumer.py --count N --mode continuous|fetch [--queue rawq] [--cpu]

``continuous`` is a continuous pull written with nats-py's core API: one inbox
subscription, pull requests ``{"batch": B, "expires": ns}`` published to
``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`` with the inbox as reply, topped up when
half used, every message acked fire-and-forget with ``nc.publish(reply, b"+ACK")``.
``fetch`` is nats-py's ``fetch(100)`` + ``await msg.ack()`` loop. Each message writes one
record (as the jsworker tasks do); the process exits after ``count`` messages or its
deadline. The server comes from ``$JSWORKER_URL``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

import nats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lib.records import record, record_cpu

STREAM = "JSW_BENCH"
BATCH = 200
EXPIRES = 5.0
DEADLINE = 600.0
# --cpu: each record carries the process's CPU time instead of the job's enqueue time.
RECORD_CPU = False


def _enqueued_ns(headers: dict[str, str] | None) -> int:
    value = (headers or {}).get("Jsw-Enqueued-At")
    return int(value) if value else 0


async def continuous(nc: nats.NATS, consumer: str, count: int) -> int:
    """Consume ``count`` messages with a continuous pull; the number consumed."""
    inbox = nc.new_inbox()
    next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{consumer}"
    done = asyncio.get_running_loop().create_future()
    state = {"got": 0, "credit": 0, "last": time.monotonic()}

    async def request(n: int) -> None:
        body = json.dumps({"batch": n, "expires": int(EXPIRES * 1e9)}).encode()
        await nc.publish(next_subject, body, reply=inbox)
        state["credit"] += n

    async def on_msg(msg: nats.aio.msg.Msg) -> None:
        headers = msg.headers
        if not msg.data and headers and "Status" in headers:
            # 408/409: the request ended; what it still owed will not come.
            state["credit"] -= int(headers.get("Nats-Pending-Messages", 0) or 0)
            if headers["Status"] not in ("408", "409"):
                return
        else:
            state["got"] += 1
            state["credit"] -= 1
            state["last"] = time.monotonic()
            if RECORD_CPU:
                record_cpu(state["got"])
            else:
                record(state["got"], _enqueued_ns(headers))
            await nc.publish(msg.reply, b"+ACK")
            if state["got"] >= count and not done.done():
                done.set_result(None)
                return
        if state["credit"] <= BATCH // 2:
            await request(BATCH - max(state["credit"], 0))

    await nc.subscribe(inbox, cb=on_msg)
    await request(BATCH)
    deadline = time.monotonic() + DEADLINE
    while not done.done() and time.monotonic() < deadline:
        try:
            await asyncio.wait_for(asyncio.shield(done), EXPIRES + 1)
        except TimeoutError:
            # A request that expired without telling us (or a lost one): start over.
            if time.monotonic() - state["last"] > EXPIRES + 1:
                state["credit"] = 0
                await request(BATCH)
    return state["got"]


async def fetch(nc: nats.NATS, consumer: str, count: int) -> int:
    """Consume ``count`` messages with ``fetch(100)`` and ``ack()``; the number consumed."""
    sub = await nc.jetstream().pull_subscribe_bind(consumer, STREAM)
    got = 0
    deadline = time.monotonic() + DEADLINE
    while got < count and time.monotonic() < deadline:
        try:
            msgs = await sub.fetch(100, timeout=EXPIRES)
        except nats.errors.TimeoutError:
            continue
        for msg in msgs:
            got += 1
            record(got, _enqueued_ns(msg.headers))
            await msg.ack()
    return got


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--mode", choices=["continuous", "fetch"], default="continuous")
    parser.add_argument("--queue", default="rawq")
    parser.add_argument("--cpu", action="store_true", help="record CPU time, not enqueue time")
    args = parser.parse_args()
    global RECORD_CPU
    RECORD_CPU = args.cpu
    nc = await nats.connect(os.environ["JSWORKER_URL"], connect_timeout=5)
    run = continuous if args.mode == "continuous" else fetch
    got = await run(nc, args.queue, args.count)
    # Acks are fire-and-forget: flush them before leaving, or the last ones are lost.
    await nc.flush(timeout=10)
    await nc.close()
    sys.exit(0 if got >= args.count else 1)


if __name__ == "__main__":
    asyncio.run(main())
