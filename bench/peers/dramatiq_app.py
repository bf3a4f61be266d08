"""Dramatiq on Redis: the peer with a different broker. The URL comes from ``BENCH_REDIS_URL``."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from lib.records import record

QUEUE = "bench_dramatiq"

broker = RedisBroker(url=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"))
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=QUEUE, actor_name="bench_noop", max_retries=0)
def noop(i: int) -> None:
    """Records that it ran."""
    record(i)
