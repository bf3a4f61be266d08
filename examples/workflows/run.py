"""Workflows end to end: ``python examples/workflows/run.py``.

Starts nats-server on a free loopback port (as ``jsworker dev`` does) and ``jsworker run
tasks`` beside it; runs a chain that succeeds, a chain whose first step is rejected (its error
callback runs, its later steps never), and a chord; prints how each ended. The worker logs the
rejected step's dead letter as an error: expected here.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from tasks import app, charge, notify, reserve, thumbnail, zip_all  # noqa: E402

from jsworker import WorkflowFailed  # noqa: E402
from jsworker.testing import NatsServer  # noqa: E402
from jsworker.workflows import chain, chord, group  # noqa: E402


async def run_workflows() -> None:
    paid = await chain(reserve.s(1, "book"), charge.s(Decimal("12.50"))).aapply()
    print(f"chain: {await paid.aresult(timeout=30)}")

    stopped = await chain(reserve.s(2, "sold-out"), charge.s(Decimal("3.00")), on_error=notify.s()).aapply()
    try:
        await stopped.aresult(timeout=30)
    except WorkflowFailed as exc:
        print(f"chain stopped: {exc}")
    status = await app.workflow(stopped.id).astatus()
    print(f"  its state: {status.state} at step {status.at}; step 1 enqueued: {status.steps[1] is not None}")

    images = group(thumbnail.s(f"photo-{i}.jpg", 320) for i in range(3))
    zipped = await chord(images, zip_all.s()).aapply()
    print(f"chord: {await zipped.aresult(timeout=30)}")
    await app.aclose()


def main() -> None:
    with NatsServer() as server:
        app.servers = [server.url]
        worker = subprocess.Popen(
            [sys.executable, "-m", "jsworker", "run", "tasks", "--log-level", "warning"],
            cwd=HERE,
            env=dict(os.environ, JSWORKER_URL=server.url),
        )
        try:
            asyncio.run(run_workflows())
        finally:
            worker.send_signal(signal.SIGTERM)
            code = worker.wait(30)
    if code != 0:
        raise SystemExit(code)


if __name__ == "__main__":
    main()
