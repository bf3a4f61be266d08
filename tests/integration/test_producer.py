"""Producers against a real server: the sync bridge, fork safety, and the in-loop warning."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import subprocess
import sys
import threading
import time
import urllib.request
import warnings
from collections.abc import Iterator
from typing import Any

import nats
import nats.errors
import pytest
from nats.aio.msg import Msg
from prometheus_client import CollectorRegistry

from jsworker import App, EnqueueError, Task
from jsworker.testing import NatsServer

from ..support import wait_until, wait_until_async


@pytest.fixture
def app(nats_server: NatsServer) -> Iterator[App]:
    """An app producing to this test's server; its sync connection closed afterwards."""
    app = App("prod", nats_server.url)
    yield app
    app.close()


def _task(app: App) -> Task[[int], None]:
    @app.task
    def job(n: int) -> None: ...

    return job


def _stored(url: str) -> int:
    async def count() -> int:
        nc = await nats.connect(url)
        try:
            return int((await nc.jetstream().stream_info("JSW_PROD")).state.messages)
        finally:
            await nc.close()

    return asyncio.run(count())


def test_sync_enqueues_share_one_connection(app: App, nats_server: NatsServer) -> None:
    """Many .delay calls reuse the background connection instead of connecting per call."""
    job = _task(app)
    job.delay(1)
    first = app.bridge._loop
    receipts = [job.delay(i) for i in range(50)]
    assert app.bridge._loop is first
    assert len({r.seq for r in receipts}) == 50
    assert _stored(nats_server.url) == 51


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_enqueues_on_its_own_connection(app: App, nats_server: NatsServer) -> None:
    """A process that forks after enqueueing (a pre-fork web server) enqueues fine in the child,
    and the parent's connection it forgets reports nothing there (its pending tasks were each
    reported destroyed once collected)."""
    job = _task(app)
    job.delay(1)
    # What earlier tests of this process left to collect is not the child's to report.
    gc.collect()
    said, told = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: exit status tells the parent whether the enqueue worked
        code = 1
        try:
            os.close(said)
            reported = _asyncio_errors()
            code = 0 if not job.delay(2).duplicate else 1
            gc.collect()
            os.write(told, "\n".join(reported).encode())
        finally:
            os._exit(code)
    os.close(told)
    with os.fdopen(said, "rb") as child:
        heard = child.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert heard == ""
    job.delay(3)  # and the parent's connection still works
    assert _stored(nats_server.url) == 3


def _asyncio_errors() -> list[str]:
    """What asyncio reports from now on (a task destroyed while pending, among others)."""
    reported: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            reported.append(record.getMessage())

    logging.getLogger("asyncio").addHandler(Catch(logging.ERROR))
    return reported


def test_a_script_that_never_closes_its_app_exits_clean(nats_server: NatsServer) -> None:
    """``task.delay`` in a script that ends without ``app.close()``: at exit the background
    connection is closed and its loop ended, with nothing reported (each such exit printed
    "Task was destroyed but it is pending!" for the connection's guard)."""
    script = (
        "from jsworker import App\n"
        f"app = App('prod', {nats_server.url!r})\n"
        "@app.task\n"
        "def work(i: int) -> None: ...\n"
        "print(work.delay(1).seq)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
    assert "destroyed" not in done.stderr, done.stderr


@pytest.mark.anyio
async def test_delay_inside_a_running_loop_warns_once(app: App) -> None:
    """.delay in async code works but blocks the loop: it says so, once."""
    job = _task(app)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        receipts = [job.delay(1), job.delay(2)]
    assert receipts[0].seq < receipts[1].seq
    runtime = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(runtime) == 1
    assert "adelay" in str(runtime[0].message)


@pytest.mark.slow
def test_an_enqueue_in_asyncio_run_leaves_no_socket_open(nats_server: NatsServer) -> None:
    """``asyncio.run(main())`` around an enqueue, with no close: the app's connection closes
    with the loop. Before, the socket outlived the loop and the garbage collector closed it
    later, in whatever code ran then, with a ResourceWarning; and the server kept the client
    until that moment."""

    def enqueue_once() -> App:
        app = App("prod", nats_server.url)
        job = _task(app)

        async def main() -> None:
            await job.adelay(1)

        asyncio.run(main())
        return app

    def connections() -> int:
        with urllib.request.urlopen(f"{nats_server.monitoring_url}/connz", timeout=5) as answer:
            return int(json.loads(answer.read())["num_connections"])

    unraisable: list[str] = []
    hook = sys.unraisablehook
    sys.unraisablehook = lambda u: unraisable.append(repr(u.exc_value))
    try:
        app = enqueue_once()
        # The server sees the client go while the app still lives.
        wait_until(connections, until=lambda n: n == 0, message="the server to see the client go")
        del app
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert unraisable == []


def test_enqueue_rides_out_a_server_restart(app: App, nats_server: NatsServer) -> None:
    """A .delay issued while the server is down completes once it is back: one job, not a duplicate."""
    job = _task(app)
    job.delay(0)  # connection and stream exist
    nats_server.kill()
    restarted = threading.Timer(1.5, nats_server.restart)
    restarted.start()
    try:
        receipt = job.delay(1)
    finally:
        restarted.join()
    assert not receipt.duplicate
    assert _stored(nats_server.url) == 2


def test_enqueue_gives_up_with_a_clear_error(nats_server: NatsServer) -> None:
    """With the server gone for longer than publish_timeout, .delay raises EnqueueError in time."""
    app = App("prod", nats_server.url, publish_timeout=1.5)
    try:
        job = _task(app)
        job.delay(0)
        nats_server.kill()
        started = time.monotonic()
        with pytest.raises(EnqueueError, match="not acknowledged") as gave_up:
            job.apply((1,), job_id="order-7")
        assert time.monotonic() - started < 10
        # What the caller needs to try again without making a second job, said plainly.
        assert gave_up.value.job_id == "order-7"
        assert "stored later" in str(gave_up.value) and "job_id=err.job_id" in str(gave_up.value)
    finally:
        app.close()


@pytest.mark.anyio
@pytest.mark.parametrize("job_id", [None, "order-42"])
async def test_a_job_whose_acknowledgement_was_lost_reads_as_enqueued(
    nats_server: NatsServer, job_id: str | None
) -> None:
    """The server stores the first try but its answer never arrives (cut here, at the client);
    the retry with the same id is answered "duplicate": the receipt says enqueued, and the
    job is counted as enqueued, once. An explicit id's retry is not refused by the first
    try's own message on its subject."""
    app = App("prod", nats_server.url, metrics_registry=CollectorRegistry())
    job = _task(app)
    await app.provision()
    nc = (await app.producer.connection()).nc
    request = nc.request
    tries = 0

    async def lossy(subject: str, payload: bytes = b"", timeout: float = 0.5, **kw: Any) -> Msg:
        nonlocal tries
        tries += 1
        if tries == 1:
            await nc.publish(subject, payload, headers=kw.get("headers"))  # stored; the answer is lost
            await nc.flush()
            raise nats.errors.TimeoutError
        return await request(subject, payload, timeout=timeout, **kw)

    nc.request = lossy  # type: ignore[method-assign,assignment]
    try:
        receipt = await job.aapply((7,), job_id=job_id)
    finally:
        nc.request = request  # type: ignore[method-assign]
    assert tries == 2 and not receipt.duplicate
    enqueued = app.metrics.registry.get_sample_value(
        "jsworker_jobs_enqueued_total", {"queue": "default", "task": "job"}
    )
    assert enqueued == 1.0
    assert await asyncio.to_thread(_stored, nats_server.url) == 1
    await app.aclose()


@pytest.mark.anyio
async def test_an_explicit_job_id_names_one_job_while_it_waits(nats_server: NatsServer) -> None:
    """Past the dedup window (1 s here) a second job with the same explicit id is still
    refused while the first waits: the server checks the id's subject."""
    app = App("prod", nats_server.url, duplicate_window=1)
    job = _task(app)
    await app.provision()
    first = await job.aapply((1,), job_id="order-42")
    window_over = time.monotonic() + 1.5
    await wait_until_async(
        lambda: time.monotonic() > window_over, timeout=5, message="the dedup window to pass"
    )
    second = await job.aapply((2,), job_id="order-42")
    assert second.duplicate and second.id == first.id and second.seq == first.seq
    assert await asyncio.to_thread(_stored, nats_server.url) == 1
    await app.aclose()
