"""Tasks the job-lifecycle fault tests run in real ``jsworker run`` processes.

Every run records ``start`` and ``done`` with :func:`jsworker.testing.record_execution` (the
file ``JSW_TEST_RECORD`` names); a run cancelled while it waits records ``stopped`` instead of
``done``. A ``capped`` run also writes one more line as it ends::

    span <job id> <task> <pid> <attempt> <unix start> <unix end>

With seven fields the line is skipped by ``parse_execution``, so counting is unchanged.

A held run waits for its gate, the file ``gate-<name>`` next to the record file: the test
opens it (creates the file, then announces it on :func:`gate_subject`) when the run may
finish, so whether a job finishes never depends on how long anything takes. A run started
after the opening finds the file; one already waiting hears the announcement.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path

import nats.errors

from jsworker import App, current_job
from jsworker.testing import append_record
from jsworker.testing import record_execution as record

# ack_wait=2: a job held by a worker that died comes back within seconds.
app = App("lcy", ack_wait=2)

# At most 4 jobs of this queue run at once across every worker (the consumer's max_ack_pending).
MAX_RUNNING = 4
app.queue("capped", max_running=MAX_RUNNING)

# Longer than any test waits: a gate nobody opens ends the run with an error, never a hang.
_GATE_LIMIT = 120.0


def gate(name: str) -> Path:
    """The file whose existence lets the runs held on ``name`` finish."""
    return Path(os.environ["JSW_TEST_RECORD"]).parent / f"gate-{name}"


def gate_subject(name: str) -> str:
    """Where the opening of gate ``name`` is announced to the runs waiting on it."""
    return f"lcy-test.gate.{name}"


async def held(name: str) -> None:
    """Wait until gate ``name`` is open; record ``stopped`` when cancelled meanwhile (other
    fault apps hold their runs with it too)."""
    conn = await app.producer.connection()  # the worker's own
    opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def announced(_: object) -> None:
        if not opened.done():
            opened.set_result(None)

    sub = await conn.nc.subscribe(gate_subject(name), cb=announced)
    try:
        # Subscribed before the file is looked at: an opening after the look is heard. With
        # the connection down (a server restart) the flush fails, and the subscription goes
        # out first thing on reconnect: the run waits on, as the job it stands for would.
        with contextlib.suppress(nats.errors.Error, TimeoutError):
            await conn.nc.flush()
        if not gate(name).exists():
            await asyncio.wait_for(opened, _GATE_LIMIT)
    except asyncio.CancelledError:
        record("stopped")
        raise
    finally:
        await sub.unsubscribe()


@app.task(store_result=True)
async def hold(tag: str) -> str:
    """Runs until gate ``tag`` opens."""
    record("start")
    await held(tag)
    record("done")
    return tag


@app.task(unique=True, store_result=True)
async def unique_hold(key: str) -> str:
    """A unique job (one at a time per ``key``) that runs until gate ``key`` opens."""
    record("start")
    await held(key)
    record("done")
    return key


@app.task(queue="capped")
async def capped(n: int, seconds: float) -> int:
    """Sleeps ``seconds``; writes its start and end (unix time) on a ``span`` line."""
    began = time.time()
    record("start")
    await asyncio.sleep(seconds)
    record("done")
    job = current_job()
    append_record(f"span {job.id} {job.task} {os.getpid()} {job.attempt} {began:.6f} {time.time():.6f}\n")
    return n


@app.task(store_result=True)
async def big(size: int) -> str:
    """Returns a string of ``size`` characters (a result near or over max_payload)."""
    record("start")
    record("done")
    return "x" * size


@app.task(store_result=True, max_retries=0)
async def loud(size: int) -> None:
    """Fails at once with an error message of ``size`` characters."""
    record("start")
    raise ValueError("y" * size)
