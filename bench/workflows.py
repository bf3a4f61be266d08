"""Workflows next to the same work done without them, in one run on one server.

    .venv/bin/python bench/workflows.py [--runs 3] [--quick]

* **Chain step.** A chain of N no-op steps (``chain(step.s(0), step.s(), ...)``) against N
  jobs that each enqueue the next themselves (``await step_by_hand.adelay(...)`` at their
  end): the time from start to the last step's end, per step. The difference is what a
  step's continuation costs: the state read, the atomic batch of state and next job.
* **Chord.** ``chord([member.s(i) for i in range(M)], total.s())`` for M = 100 and 1,000,
  from start to the callback's result, against M plain jobs enqueued with one
  ``adelay_many`` and waited for until the last one ended (counted in the worker).

Both run on one in-process worker (``-c 100``) against a nats-server of its own; each figure
is the median of ``--runs`` runs, figure and baseline alternating so load hits both alike.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jsworker import App
from jsworker._runtime.settings import WorkerSettings
from jsworker._runtime.worker import Worker
from jsworker._server import NatsServer
from jsworker.workflows import chain, chord

ended = 0
done = asyncio.Event()
target = 0


def _count() -> None:
    global ended
    ended += 1
    if ended >= target:
        done.set()


def make_app(url: str) -> App:
    app = App("benchflow", url, workflows=True)

    @app.task
    async def step(n: int) -> int:
        return n + 1

    @app.task
    async def step_by_hand(n: int, last: int) -> None:
        if n < last:
            await step_by_hand.adelay(n + 1, last)
        else:
            _count()

    @app.task
    async def member(i: int) -> int:
        _count()
        return i

    @app.task(store_result=True)
    async def total(values: list[int]) -> int:
        return sum(values)

    return app


async def _expect(n: int) -> None:
    global ended, target
    ended, target = 0, n
    done.clear()


async def chain_figures(app: App, steps: int) -> tuple[float, float]:
    """Seconds per step: a chain of ``steps``, and jobs chaining themselves by hand."""
    step, by_hand = app.tasks["step"], app.tasks["step_by_hand"]
    started = time.perf_counter()
    flow = await chain(step.s(0), *[step.s() for _ in range(steps - 1)]).aapply()
    assert await flow.aresult(timeout=300) == steps
    with_chain = (time.perf_counter() - started) / steps
    await _expect(1)
    started = time.perf_counter()
    await by_hand.adelay(1, steps)
    await asyncio.wait_for(done.wait(), 300)
    return with_chain, (time.perf_counter() - started) / steps


async def chord_figures(app: App, members: int) -> tuple[float, float]:
    """Seconds to a chord's callback result, and to the end of as many plain jobs."""
    member, total = app.tasks["member"], app.tasks["total"]
    await _expect(members)
    started = time.perf_counter()
    flow = await chord([member.s(i) for i in range(members)], total.s()).aapply()
    assert await flow.aresult(timeout=300) == sum(range(members))
    with_chord = time.perf_counter() - started
    await _expect(members)
    started = time.perf_counter()
    await member.adelay_many([(i,) for i in range(members)])
    await asyncio.wait_for(done.wait(), 300)
    return with_chord, time.perf_counter() - started


async def main(runs: int, quick: bool) -> None:
    steps, sizes = (50, (100,)) if quick else (200, (100, 1000))
    with NatsServer() as server:
        app = make_app(server.url)
        await app.provision()
        worker = Worker(app, WorkerSettings(concurrency=100, grace=1))
        running = asyncio.create_task(worker.run())
        await worker.started.wait()
        rows: dict[str, list[tuple[float, float]]] = {}
        for _ in range(runs):
            rows.setdefault(f"chain step ({steps} steps), ms", []).append(
                tuple(1000 * x for x in await chain_figures(app, steps))  # type: ignore[arg-type]
            )
            for m in sizes:
                rows.setdefault(f"chord of {m}, ms to the callback's result", []).append(
                    tuple(1000 * x for x in await chord_figures(app, m))  # type: ignore[arg-type]
                )
        worker.stop()
        await running
        await app.aclose()
    print("| figure | workflow | without | ratio |")
    print("|---|---|---|---|")
    for name, pairs in rows.items():
        flow = statistics.median(p[0] for p in pairs)
        plain = statistics.median(p[1] for p in pairs)
        print(f"| {name} | {flow:.2f} | {plain:.2f} | {flow / plain:.2f}x |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    options = parser.parse_args()
    asyncio.run(main(options.runs, options.quick))
