"""taskiq + taskiq-nats: the peer on the same nats-server as jsworker.

``PullBasedJetStreamBroker`` with its defaults (pull batch 1) unless ``BENCH_TASKIQ_PULL_BATCH``
and ``BENCH_TASKIQ_PULL_TIMEOUT`` say otherwise; the server comes from ``JSWORKER_URL``.
"""

from __future__ import annotations

import os

from lib.records import record
from taskiq_nats import PullBasedJetStreamBroker

STREAM = "taskiq_bench"
SUBJECT = "taskiq_bench"
DURABLE = "taskiq_bench_durable"

_batch = int(os.environ.get("BENCH_TASKIQ_PULL_BATCH", "1"))
_timeout = os.environ.get("BENCH_TASKIQ_PULL_TIMEOUT")

broker = PullBasedJetStreamBroker(
    servers=os.environ.get("JSWORKER_URL", "nats://127.0.0.1:4222"),
    subject=SUBJECT,
    stream_name=STREAM,
    durable=DURABLE,
    pull_consume_batch=_batch,
    pull_consume_timeout=float(_timeout) if _timeout else None,
)


@broker.task(task_name="bench.noop")
async def noop(i: int) -> None:
    """Records that it ran."""
    record(i)
