"""Cancel tells the truth on a busy queue: a worker holding prefetched jobs, jobs starting and
finishing while the cancels run. Every True names a job that never finished and never starts
afterwards; every job that finished gives False; no cancel raises for a job that is gone."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import nats
import pytest
from nats.aio.msg import Msg

from jsworker import App
from jsworker.testing import NatsServer

from ..support import wait_until_async
from .harness import Records, Workers, app_module

pytestmark = pytest.mark.faults

JOBS = 3000
CANCELS = 400
CALLERS = 8
# Where the cancels aim, counted in jobs from the last one to finish: just finished, running
# (8 at once), held in the worker's buffer (up to 200), or still queued.
AIM = (-20, 260)


@pytest.fixture
def truth_app() -> Iterator[ModuleType]:
    yield from app_module("truth_app")


def test_cancel_is_true_only_for_jobs_that_never_finish(
    nats_server: NatsServer, tmp_path: Path, truth_app: ModuleType
) -> None:
    app = truth_app.app
    app.servers = [nats_server.url]
    workers = Workers(tmp_path)
    try:
        worker = workers.start(
            nats_server.url, "w", "--concurrency", "8", "--max-messages", "200", module="truth_app"
        )
        worker.wait_started()
        answers, succeeded = asyncio.run(_scenario(app, nats_server.url))
        aborted = [e.get("reason") for e in worker.log_events() if e.get("event") == "job.aborted"]
    finally:
        workers.stop_all()
    # The cancels reached jobs in every place: a worker's buffer, its running jobs.
    assert "cancelled before it started" in aborted and "cancelled while it ran" in aborted, aborted
    records = Records(workers.record)
    starts = {r.job_id: r.at for r in records.of("start")}
    true = {job_id: at for job_id, (ok, at) in answers.items() if ok}
    false = {job_id for job_id, (ok, _) in answers.items() if not ok}
    assert true and false, "the cancels landed only on one side: no race was tried"
    # True: never finished, and not started after the cancel returned.
    assert not set(true) & succeeded
    assert all(starts.get(job_id, 0.0) < returned for job_id, returned in true.items())
    # False: every one of them had finished.
    assert false <= succeeded, sorted(false - succeeded)[:5]
    # Nothing lost: each job either finished or was cancelled.
    assert len(succeeded) + len(true) == JOBS


async def _scenario(app: App, url: str) -> tuple[dict[str, tuple[bool, float]], set[str]]:
    """Enqueue the jobs, cancel a sample of them while the worker runs the rest; the answers
    (with when each came, ``time.monotonic()``) and the jobs that finished."""
    succeeded: set[str] = set()
    nc = await nats.connect(url)

    async def on_success(msg: Msg) -> None:
        succeeded.add(json.loads(msg.data)["job_id"])

    await nc.subscribe("jsw.truth.ev.default.quick.succeeded", cb=on_success)
    await nc.flush()
    jobs = await app.tasks["quick"].adelay_many([(n,) for n in range(JOBS)])
    ids = [job.id for job in jobs]
    answers: dict[str, tuple[bool, float]] = {}
    aimed: set[int] = set()
    rng = random.Random(7)

    async def caller() -> None:
        while len(aimed) < CANCELS:
            front = len(succeeded) + sum(ok for ok, _ in answers.values())
            if front + AIM[1] >= JOBS:
                return  # the queue is nearly done: nothing ahead left to aim at
            index = max(0, front + rng.randint(*AIM))
            if index in aimed:
                await asyncio.sleep(0.001)
                continue
            aimed.add(index)
            job_id = ids[index]
            ok = await app.acancel(job_id)
            answers[job_id] = (ok, time.monotonic())

    await asyncio.gather(*(caller() for _ in range(CALLERS)))
    await wait_until_async(
        lambda: len(succeeded) + sum(ok for ok, _ in answers.values()) >= JOBS,
        timeout=120,
        message="every job to finish or be cancelled",
    )
    await nc.close()
    await app.aclose()
    return answers, succeeded
