"""``map_dataframe`` and ``read_results`` against a real nats-server and a real worker: every
row comes back with what its job came to (results, failures with their error, jobs not done
in time with their state, records expired as ``unknown``), and running it again within the
duplicate window makes no new job."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import nats
import pytest

from jsworker import App, ConfigurationError, Reject
from jsworker._runtime.settings import WorkerSettings
from jsworker._runtime.worker import Worker
from jsworker.spark import ResultSource, map_dataframe, read_results, register
from jsworker.testing import NatsServer

from ..support import wait_until

pytestmark = pytest.mark.timeout(300)

ROWS = 400


@pytest.fixture(scope="module")
def session(spark: Any) -> Any:
    register(spark)
    return spark


@contextmanager
def worker_thread(app: App) -> Iterator[Worker]:
    """A worker of ``app`` on an event loop of its own thread, stopped afterwards: the test's
    thread blocks in Spark meanwhile."""
    worker = Worker(app, WorkerSettings(concurrency=20, grace=1))
    loops: list[asyncio.AbstractEventLoop] = []

    async def run() -> None:
        loops.append(asyncio.get_running_loop())
        await worker.run()

    # asyncio.run finishes what is left on the loop before closing it.
    thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
    thread.start()
    try:
        wait_until(lambda: bool(worker._consumers), timeout=30, message="the worker to pull")
        yield worker
    finally:
        for loop in loops:
            with contextlib.suppress(RuntimeError):  # closed: the worker ended already
                loop.call_soon_threadsafe(worker.stop)
        thread.join(30)


def scoring_app(url: str, name: str, **options: Any) -> App:
    app = App(name, url, max_retries=0)

    @app.task(store_result=True, **options)
    def score(order_id: int) -> dict[str, int]:
        if order_id % 20 == 0:
            raise Reject(f"order {order_id} is refused")
        return {"order": order_id, "double": 2 * order_id}

    return app


def last_seq(url: str, stream: str) -> int:
    async def read() -> int:
        nc = await nats.connect(url)
        try:
            return int((await nc.jetstream().stream_info(stream)).state.last_seq)
        finally:
            await nc.close()

    return asyncio.run(read())


def test_results_come_back_joined_to_every_row(session: Any, nats_server_module: NatsServer) -> None:
    url = nats_server_module.url
    app = scoring_app(url, "sparkmap")
    score = app.tasks["score"]
    orders = session.range(0, ROWS, numPartitions=4).selectExpr("id AS order_id")
    with worker_thread(app):
        out = map_dataframe(
            orders, score, key="order_id", timeout=120, result_schema="order long, double long"
        )
        rows = {r.order_id: r for r in out.collect()}
        stored = last_seq(url, "JSW_SPARKMAP")
        again = {r.order_id: r for r in map_dataframe(orders, score, key="order_id", timeout=120).collect()}
    assert out.columns == [
        "order_id",
        "job_id",
        "state",
        "result",
        "error",
        "attempts",
        "duration",
        "finished_at",
    ]
    assert sorted(rows) == list(range(ROWS))  # every row, none doubled
    failed = {i for i, r in rows.items() if r.state == "failed"}
    assert failed == set(range(0, ROWS, 20))
    assert all(rows[i].error.startswith("Reject: order") and rows[i].result is None for i in failed)
    for i, r in rows.items():
        if i not in failed:
            assert (r.state, r.result.order, r.result.double, r.attempts) == ("succeeded", i, 2 * i, 1)
            assert r.duration >= 0 and r.finished_at is not None
    # Again within the duplicate window: no new job, the same results (as JSON text now).
    assert last_seq(url, "JSW_SPARKMAP") == stored
    assert {i: (r.state, r.job_id) for i, r in again.items()} == {
        i: (r.state, r.job_id) for i, r in rows.items()
    }
    assert again[1].result == '{"order":1,"double":2}'


def test_jobs_not_done_in_time_come_back_with_their_state(
    session: Any, nats_server_module: NatsServer
) -> None:
    """No worker runs: after the timeout every row is there, queued."""
    app = scoring_app(nats_server_module.url, "sparkslow")
    orders = session.range(0, 30, numPartitions=2).selectExpr("id AS order_id")
    out = map_dataframe(orders, app.tasks["score"], key="order_id", timeout=0.5).collect()
    assert sorted(r.order_id for r in out) == list(range(30))
    assert {r.state for r in out} == {"queued"} and all(r.result is None for r in out)


def test_expired_results_read_as_unknown(session: Any, nats_server_module: NatsServer) -> None:
    """A record past its result_ttl is gone: read_results says unknown for it, and for an id
    that never was a job."""
    url = nats_server_module.url
    app = scoring_app(url, "sparkttl", result_ttl=1)
    score = app.tasks["score"]
    orders = session.range(1, 4, numPartitions=1).selectExpr("id AS order_id")
    with worker_thread(app):
        done = map_dataframe(orders, score, key="order_id", timeout=60).select("job_id").collect()
    ids = [r.job_id for r in done]
    source = ResultSource.of(app)
    frame = session.createDataFrame([(i,) for i in [*ids, "never-a-job"]], "job_id string")

    def states() -> set[str]:
        return {r.state for r in read_results(frame, source).collect()}

    wait_until(states, until=lambda found: found == {"unknown"}, timeout=30, message="the records to expire")


def test_bad_calls_are_refused(session: Any, nats_server_module: NatsServer) -> None:
    app = App("sparkbad", nats_server_module.url)

    @app.task
    def plain(order_id: int) -> None: ...

    orders = session.range(0, 3).selectExpr("id AS order_id")
    with pytest.raises(ConfigurationError, match="store_result=True"):
        map_dataframe(orders, plain, key="order_id")
    with pytest.raises(ConfigurationError, match="'job_id' column"):
        read_results(orders, ResultSource.of(app))
