"""Typed enqueue and result, end to end: ``python examples/typed_tasks/run.py``.

Starts nats-server on a free loopback port (as ``jsworker dev`` does) and ``jsworker run
billing`` beside it, enqueues one job with typed arguments, prints its typed result, and shows
an argument of the wrong type refused at enqueue.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from datetime import date
from decimal import Decimal
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from billing import Invoice, amount_due, app  # noqa: E402

from jsworker.testing import NatsServer  # noqa: E402


async def enqueue_and_wait() -> None:
    invoices = [
        Invoice("2026-001", Decimal("120.50"), date(2026, 11, 30)),
        Invoice("2026-002", Decimal("80.25"), date(2026, 12, 15)),
        Invoice("2026-003", Decimal("10.00"), date(2027, 1, 31)),
    ]
    job = await amount_due.adelay(invoices, date(2026, 12, 31))
    due = await job.aresult(timeout=30)
    print(f"amount due: {due!r}")
    try:
        await amount_due.adelay(invoices, 20261231)  # type: ignore[arg-type]
    except TypeError as exc:
        print(f"refused at enqueue: {exc}")
    await app.aclose()


def main() -> None:
    with NatsServer() as server:
        app.servers = [server.url]
        worker = subprocess.Popen(
            [sys.executable, "-m", "jsworker", "run", "billing", "--log-level", "warning"],
            cwd=HERE,
            env=dict(os.environ, JSWORKER_URL=server.url),
        )
        try:
            asyncio.run(enqueue_and_wait())
        finally:
            worker.send_signal(signal.SIGTERM)
            code = worker.wait(30)
    if code != 0:
        raise SystemExit(code)


if __name__ == "__main__":
    main()
