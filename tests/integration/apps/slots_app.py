"""A process task for tests/integration/test_task_process_slots.py: it writes the pid of the
process running it to ``pidfile``, then waits until ``gate`` exists. Its middleware records
which jobs' runs began."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from jsworker import App, JobContext, Middleware


class Begun(Middleware):
    """The ids of the jobs whose run began (``around_run`` entered), in order."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    async def around_run(self, job: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        self.ids.append(job.id)
        return await call_next()


begun = Begun()
app = App("slots", middleware=[begun])


@app.task(executor="process", store_result=True)
def gated(pidfile: str, gate: str) -> int:
    Path(pidfile).write_text(str(os.getpid()))
    while not os.path.exists(gate):
        time.sleep(0.01)  # a process task blocks: it has no event loop to wait on
    return os.getpid()
