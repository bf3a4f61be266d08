"""A process task for tests/integration/test_task_process_slots.py: it writes the pid of the
process running it to ``pidfile``, then waits at ``gate``, a FIFO, until the test opens it for
writing. Its middleware records which jobs' runs began."""

from __future__ import annotations

import os
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
    # Opening a FIFO for reading returns once a writer opens it: the test's "go".
    os.close(os.open(gate, os.O_RDONLY))
    return os.getpid()
