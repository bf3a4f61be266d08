"""Every kind of job at once, for tests/faults/test_stream_leaders.py: plain jobs, kept results,
delayed jobs, a fair queue, a partition-limited task, a rate-limited task, a periodic schedule
and chords, so that the loss of any one of the app's streams' leaders meets the feature that
writes to it.

Every run records ``start`` and ``done`` (:func:`jsworker.testing.record_execution`, in the file
``JSW_TEST_RECORD`` names; the attempt is the server's delivery count). A run of a job that was
scheduled (a delayed job, a tick) also writes, at its start::

    due <job id> <unix time> <scheduled_for>

a line of four fields, which ``parse_execution`` skips. The wall clock, not the monotonic one,
is what a due time is compared with: the server fires on wall-clock time. Every run also
writes the stream sequence of the message it runs::

    seq <job id> <stream sequence>

so that a job stored twice (two messages) is told from one message handed out twice.
"""

from __future__ import annotations

import asyncio
import time

from jsworker import App, current_job
from jsworker.testing import append_record
from jsworker.testing import record_execution as record

# ack_wait=2: a job whose acknowledgement died with a leader comes back within seconds.
app = App("mix", ack_wait=2, workflows=True)
app.queue("turns", fair=True)

#: The rate-limited task's limit (starts per second, across both workers).
RATE = "10/s"


def _started() -> None:
    """The run's ``start`` record and its message's ``seq`` line."""
    record("start")
    job = current_job()
    append_record(f"seq {job.id} {job.seq}\n")


def _record_due() -> None:
    job = current_job()
    due = job.scheduled_for
    append_record(f"due {job.id} {time.time():.6f} {due.timestamp() if due else -1:.6f}\n")


@app.task
async def plain(n: int) -> int:
    _started()
    record("done")
    return n


@app.task(store_result=True)
async def kept(n: int) -> int:
    _started()
    record("done")
    return n * n


@app.task
async def later(n: int) -> int:
    """A delayed job."""
    _record_due()
    _started()
    record("done")
    return n


@app.task(queue="turns", partition_key=lambda account, **_: account)
async def turn(account: str, n: int) -> int:
    """A job of the fair queue: it waits in the intake for its partition's turn."""
    _started()
    record("done")
    return n


@app.task(partition_key=lambda account, **_: account, max_running_per_partition=1)
async def parted(account: str, n: int) -> int:
    """One job of an account at a time, across both workers: long enough to overlap if let."""
    _started()
    # A run of 50 ms is what is measured: the overlap check reads each run's span, and a run of
    # no length could overlap nothing. No event stands for that span, so it is a span of time.
    await asyncio.sleep(0.05)
    record("done")
    return n


@app.task(rate_limit=RATE)
async def rated(n: int) -> int:
    _started()
    record("done")
    return n


@app.task
async def member(i: int) -> int:
    _started()
    record("done")
    return i


@app.task(store_result=True)
async def collect(values: list[int]) -> int:
    """A chord's callback."""
    _started()
    record("done")
    return sum(values)


@app.task
async def tick() -> None:
    """The periodic schedule's job."""
    _record_due()
    _started()
    record("done")


# Every tick runs however late: a tick missing from the records is one the server never fired.
app.schedule(tick, every=1, name="pulse", expires="never")
