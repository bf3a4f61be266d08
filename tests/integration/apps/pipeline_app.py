"""An app with every feature that adds a stage to the job pipeline on (events, workflows, a
task's rate limit, a partition limit, a process task, a middleware), for
tests/integration/test_pipeline.py: a process task must be a module's top-level function."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from jsworker import App, JobContext, Middleware


class Audit(Middleware):
    async def around_run(self, job: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        return await call_next()

    async def on_settled(self, job: JobContext, settled: Any) -> None:
        return None


app = App("pipemap", events=True, workflows=True, middleware=[Audit()])


@app.task(rate_limit="100/s")
async def limited() -> None: ...


@app.task(partition_key=lambda key: key, max_running_per_partition=1)
async def per_key(key: str) -> None: ...


@app.task(executor="process")
def crunch(n: int) -> int:
    return n * n
