"""A task-tracking table: every job's row goes enqueued -> started -> retrying -> succeeded /
failed / cancelled / expired, as a Celery app's ``before_task_publish`` / ``task_prerun`` /
``task_postrun`` / ``task_failure`` / ``task_revoked`` handlers kept it.

A middleware writes the steps on the way (cheap, in the process that takes them); the final
state comes from a final-state handler, which hears every job at least once wherever it
ended: a job cancelled before any worker received it, or one acked by a worker killed right
after, whose ``on_settled`` never runs.

The table is SQLite here (``TRACKING_DB`` names the file) so the example runs anywhere; a
real app would write to its own database through a pool its start hook opens.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Any

from jsworker import App, JobContext, JobStatus, Middleware, OutgoingJob, Reject, Settled, current_job

SCHEMA = """
create table if not exists jobs (
    id text primary key, task text, queue text, state text, attempts integer default 0,
    error text, updated_at real
)
"""


def _db() -> sqlite3.Connection:
    conn = sqlite3.connect(os.environ.get("TRACKING_DB", "tracking.sqlite3"), timeout=10)
    conn.execute(SCHEMA)
    return conn


def _write(sql: str, **params: Any) -> None:
    with _db() as conn:  # one short transaction per change: producers and workers share it
        conn.execute(sql, {**params, "now": time.time()})


# A step on the way never overwrites a final state the handler wrote first (it runs in
# another process, and may be quicker).
_NOT_FINAL = "state not in ('succeeded', 'failed', 'cancelled', 'expired')"


class TrackJobs(Middleware):
    """Keeps one row per job id with the steps on the way: enqueued, started, retrying."""

    def on_enqueue(self, job: OutgoingJob) -> None:
        # In the caller's process, before the job is sent: a row exists before any worker
        # can start it. A periodic schedule is not a job: its ticks get rows when they start.
        if job.kind != "schedule":
            _write(
                "insert or replace into jobs (id, task, queue, state, updated_at) "
                "values (:id, :task, :queue, 'enqueued', :now)",
                id=job.id, task=job.task, queue=job.queue,
            )  # fmt: skip

    async def around_run(self, job: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        await asyncio.to_thread(
            functools.partial(
                _write,
                "insert into jobs (id, task, queue, state, attempts, updated_at) "
                "values (:id, :task, :queue, 'started', :attempt, :now) "
                "on conflict(id) do update set state = 'started', attempts = :attempt, updated_at = :now "
                f"where {_NOT_FINAL}",
                id=job.id, task=job.task, queue=job.queue, attempt=job.attempt,
            )
        )  # fmt: skip
        return await call_next()

    async def on_settled(self, job: JobContext, settled: Settled) -> None:
        if settled.state not in ("retrying", "snoozed"):
            return  # a final state: the handler below writes it
        error = None if settled.error is None else f"{type(settled.error).__name__}: {settled.error}"
        await asyncio.to_thread(
            functools.partial(
                _write,
                "update jobs set state = :state, error = :error, updated_at = :now "
                f"where id = :id and {_NOT_FINAL}",
                state=settled.state, error=error, id=job.id,
            )
        )  # fmt: skip


def show() -> list[tuple[str, str, str, int, str | None]]:
    """The table: (id, task, state, attempts, error), oldest change first."""
    with _db() as conn:
        return list(conn.execute("select id, task, state, attempts, error from jobs order by updated_at"))


app = App("tracking", middleware=[TrackJobs()], max_retries=1, retry_backoff=0.1, final_states=True)


@app.on_final_state("tracking")
def track_final(status: JobStatus) -> None:
    """Each job's final state, at least once (an upsert: hearing it twice changes nothing)."""
    error = None if status.error is None else f"{status.error.type}: {status.error.message}"
    _write(
        "insert into jobs (id, task, queue, state, attempts, error, updated_at) "
        "values (:id, :task, :queue, :state, :attempts, :error, :now) "
        "on conflict(id) do update set state = :state, attempts = coalesce(:attempts, attempts), "
        "error = :error, updated_at = :now",
        id=status.id, task=status.task, queue=status.queue, state=status.state.value,
        attempts=status.attempts, error=error,
    )  # fmt: skip


@app.task
async def charge(order: int) -> None:
    if current_job().attempt == 1 and order == 2:
        raise ConnectionError("payment gateway timed out")  # retried once, then succeeds


@app.task
async def ship(order: int) -> None:
    raise Reject(f"order {order} has no address")  # dead-lettered: failed


@app.task(queue="slow")
async def report(day: str) -> None:
    await asyncio.sleep(3600)  # cancelled by run.py while it runs
