"""Tasks and schedules the scheduling fault tests run in real ``jsworker run`` processes.

Every run records ``start`` and ``done`` with :func:`jsworker.testing.record_execution` (the
file ``JSW_TEST_RECORD`` names), and at its start one more line in the same file::

    wall <job id> <task> <pid> <attempt> <monotonic> <unix time> <scheduled_for> <label>

``unix time`` is the wall clock as the task began, ``scheduled_for`` is
``current_job().scheduled_for`` in unix seconds (``-`` for a job that was not scheduled) and
``label`` names the declaration that fired a tick (``-`` for other tasks). With nine fields
the line is skipped by ``parse_execution``, so the ``start``/``done`` counting is unchanged.
The wall clock, not the monotonic one, is what a due time is compared with: the server fires
on wall-clock time.

Periodic schedules come from the environment, read at import, so a worker restarted with other
values is "the code changed": ``SCHED_NAMES`` (comma-separated; no schedule when unset) and
either ``SCHED_EVERY`` (seconds) or ``SCHED_CRON`` (a six-field cron, seconds first). Each
declared schedule runs ``tick(label)``, the label naming the expression, so a tick says which
declaration fired it. Its ticks never expire: these tests count every tick the server fires,
late ones included.
"""

from __future__ import annotations

import os
import time

from jsworker import App, current_job
from jsworker.testing import append_record, record_execution

# ack_wait=2: a job held by a worker that died comes back within seconds.
app = App("sch", ack_wait=2)


def record(event: str, label: str = "-") -> None:
    """Record ``event`` for the running job; a ``start`` also writes the ``wall`` line."""
    now = time.time()
    record_execution(event)
    if event != "start":
        return
    job = current_job()
    due = f"{job.scheduled_for.timestamp():.6f}" if job.scheduled_for is not None else "-"
    mono = time.monotonic()
    append_record(
        f"wall {job.id} {job.task} {os.getpid()} {job.attempt} {mono:.6f} {now:.6f} {due} {label}\n"
    )


@app.task
async def later(n: int) -> int:
    """A delayed job: records when it began and when it was due."""
    record("start")
    record("done")
    return n


# Retries come back after 0.1-0.2 s: the dead letter is there within a second of the firing.
@app.task(max_retries=1, retry_backoff=0.2, retry_backoff_max=0.2)
async def doomed(n: int) -> None:
    """Always fails: after its one retry it is dead-lettered."""
    record("start")
    raise RuntimeError(f"doomed {n} fails every time")


@app.task
async def tick(label: str) -> str:
    """What every periodic schedule of this app runs."""
    record("start", label)
    record("done")
    return label


def _declare() -> None:
    names = [n for n in os.environ.get("SCHED_NAMES", "").split(",") if n]
    every, cron = os.environ.get("SCHED_EVERY"), os.environ.get("SCHED_CRON")
    for name in names:
        if every is not None:
            app.schedule(tick, every=float(every), name=name, args=(f"every={every}",), expires="never")
        elif cron is not None:
            app.schedule(
                tick, cron=cron, name=name, args=("cron=" + cron.replace(" ", "_"),), expires="never"
            )
        else:
            raise RuntimeError("SCHED_NAMES needs SCHED_EVERY or SCHED_CRON")


_declare()
