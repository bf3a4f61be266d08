"""Process tasks (``executor="process"``) start when a task process is free for them: until
then the job waits in its slot as held back ("waiting for a task process"), so that its status
says queued, and its ``started`` event, its middleware's ``around_run`` and its start time come
when a process runs it, not when the worker took it up."""

from __future__ import annotations

from collections.abc import Awaitable

from ..execution import JobRun
from ..jobbook import JobBook
from ..limited import held_back
from ..outcomes import Settlement
from ..pipeline import Interceptor
from ..process_pool import ProcessRunner

#: What the status of a process task's job says while it waits for a process.
WAITING = "waiting for a task process"


class TaskProcessSlots(Interceptor):
    """Holds a task process for each process task's job before it runs."""

    name = "task-processes"

    def __init__(self, book: JobBook, runner: ProcessRunner) -> None:
        self._book = book
        self._runner = runner

    def admit(self, job: JobRun) -> Awaitable[None] | None:
        """Nothing for other jobs, nor when a process is free; else the wait for one."""
        task = job.task
        if task is None or not task.in_process or self._runner.try_reserve(job):
            return None
        return held_back(self._book, job, WAITING, self._runner.reserve(job))

    def after_settled(self, job: JobRun, settlement: Settlement) -> None:
        """Give back a process held for a job that did not run (it was cancelled, or the
        worker stopped)."""
        self._runner.release(job)
