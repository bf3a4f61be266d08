"""Per-job cost of the worker's hand-written hot-path pieces next to anyio's equivalents.

    .venv/bin/python bench/hotpath.py

Prints microseconds per operation (best of 5 rounds) for: starting a job's task, taking and
giving back a concurrency slot, handing a sync call to a thread, and a per-job timeout scope.
The figures quoted in the docstrings of jsworker/_runtime/ come from this script.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import anyio
import anyio.to_thread

from jsworker._runtime.limiter import Limiter
from jsworker._runtime.threads import ThreadRunner

N = 20_000
ROUNDS = 5


async def _best(label: str, op: Callable[[int], Awaitable[None]], n: int = N) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        await op(n)
        best = min(best, time.perf_counter() - started)
    micros = best / n * 1e6
    print(f"{label:<52} {micros:7.2f} us")
    return micros


async def _noop() -> None:
    return None


async def spawn_create_task(n: int) -> None:
    create = asyncio.get_running_loop().create_task
    tasks = [create(_noop()) for _ in range(n)]
    await asyncio.gather(*tasks)


async def spawn_task_group(n: int) -> None:
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(_noop)


async def slots_limiter(n: int) -> None:
    limiter = Limiter(100)
    for _ in range(n):
        await limiter.acquire()
        limiter.release()


async def slots_capacity_limiter(n: int) -> None:
    limiter = anyio.CapacityLimiter(100)
    for _ in range(n):
        await limiter.acquire()
        limiter.release()


async def slots_semaphore(n: int) -> None:
    semaphore = anyio.Semaphore(100)
    for _ in range(n):
        await semaphore.acquire()
        semaphore.release()


def _work() -> None:
    return None


async def threads_runner(n: int) -> None:
    runner = ThreadRunner(8)
    await asyncio.gather(*(runner.run(_work) for _ in range(n)))
    runner.close()


async def threads_anyio(n: int) -> None:
    limiter = anyio.CapacityLimiter(8)

    async def one() -> None:
        await anyio.to_thread.run_sync(_work, limiter=limiter)

    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(one)


async def timeout_asyncio(n: int) -> None:
    for _ in range(n):
        async with asyncio.timeout(60):
            await _noop()


async def timeout_anyio(n: int) -> None:
    for _ in range(n):
        with anyio.fail_after(60):
            await _noop()


async def main() -> None:
    print(f"{'operation (per job)':<52} {'best of ' + str(ROUNDS):>10}")
    a = await _best("start a job task: loop.create_task", spawn_create_task)
    b = await _best("start a job task: anyio task group start_soon", spawn_task_group)
    print(f"{'  ratio':<52} {b / a:7.2f}x")
    a = await _best("slot: jsworker Limiter acquire+release", slots_limiter)
    b = await _best("slot: anyio.CapacityLimiter acquire+release", slots_capacity_limiter)
    c = await _best("slot: anyio.Semaphore acquire+release", slots_semaphore)
    print(f"{'  ratio CapacityLimiter / Semaphore':<52} {b / a:7.2f}x {c / a:5.2f}x")
    a = await _best("sync call in a thread: jsworker ThreadRunner", threads_runner, 5000)
    b = await _best("sync call in a thread: anyio.to_thread.run_sync", threads_anyio, 5000)
    print(f"{'  ratio':<52} {b / a:7.2f}x")
    a = await _best("timeout scope: asyncio.timeout", timeout_asyncio)
    b = await _best("timeout scope: anyio.fail_after", timeout_anyio)
    print(f"{'  ratio':<52} {b / a:7.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
