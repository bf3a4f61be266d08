"""Producer side of the peers, run with the peers' interpreter (``bench/.peers-venv``).

    python peers/driver.py taskiq|dramatiq reset|enqueue|fill N

``enqueue`` times N one-at-a-time enqueues (and, for taskiq, N ``.kiq()`` gathered in windows
of 1000) after one warm-up, leaves the queue empty and prints one JSON object. ``fill`` puts
N jobs in an emptied queue, untimed. ``reset`` starts from a fresh queue.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

WINDOW = 1000


async def _taskiq(action: str, n: int) -> dict[str, float]:
    from peers import taskiq_app as app

    await app.broker.startup()
    js = app.broker.js
    try:
        if action == "reset":
            await js.delete_stream(app.STREAM)
            return {}
        await js.purge_stream(app.STREAM)
        if action == "fill":
            for s in range(0, n, WINDOW):
                await asyncio.gather(*(app.noop.kiq(i) for i in range(s, min(n, s + WINDOW))))
            return {}
        await app.noop.kiq(-1)
        await js.purge_stream(app.STREAM)
        start = time.perf_counter()
        for i in range(n):
            await app.noop.kiq(i)
        sequential = n / (time.perf_counter() - start)
        await js.purge_stream(app.STREAM)
        start = time.perf_counter()
        for s in range(0, n, WINDOW):
            await asyncio.gather(*(app.noop.kiq(i) for i in range(s, min(n, s + WINDOW))))
        gathered = n / (time.perf_counter() - start)
        await js.purge_stream(app.STREAM)
        return {"sequential": sequential, "gathered": gathered}
    finally:
        await app.broker.shutdown()


def _dramatiq(action: str, n: int) -> dict[str, float]:
    from peers import dramatiq_app as app

    app.broker.flush_all()
    try:
        if action == "reset":
            return {}
        if action == "fill":
            for i in range(n):
                app.noop.send(i)
            return {}
        app.noop.send(-1)
        app.broker.flush_all()
        start = time.perf_counter()
        for i in range(n):
            app.noop.send(i)
        sequential = n / (time.perf_counter() - start)
        app.broker.flush_all()
        return {"sequential": sequential}
    finally:
        app.broker.close()


def main() -> None:
    system, action, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if system == "taskiq":
        result = asyncio.run(_taskiq(action, n))
    elif system == "dramatiq":
        result = _dramatiq(action, n)
    else:
        raise SystemExit(f"unknown system {system}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
