"""The ``jsworker`` streaming sink against a real nats-server: every row of every micro-batch
becomes one job, once, also when a committed batch is run again after the duplicate window
(a query restarted from a checkpoint whose commit was lost), and when a query stopped during a
batch is restarted from its checkpoint."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import nats
import pytest

from jsworker import App, ConfigurationError
from jsworker._core.permissions import server_config
from jsworker._wire.names import ROLES, Namespace
from jsworker.spark import register
from jsworker.spark._publish import WriteSettings
from jsworker.spark._sink import ensure_sink_stream
from jsworker.testing import NatsServer

from ..integration.secured import PASSWORD, provision, server_with
from ..support import wait_until

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def session(spark: Any) -> Any:
    register(spark)
    return spark


def orders_file(folder: Path, name: str, ids: range) -> None:
    """One JSON-lines file of orders: a micro-batch of the query (one file per trigger)."""
    folder.mkdir(parents=True, exist_ok=True)
    temporary = folder / f".{name}.tmp"
    temporary.write_text("".join(json.dumps({"order_id": i}) + "\n" for i in ids))
    temporary.rename(folder / f"{name}.json")


def start_query(session: Any, app: App, source: Path, checkpoint: Path, **writes: str) -> Any:
    stream = session.readStream.schema("order_id long").option("maxFilesPerTrigger", 1).json(str(source))
    out = (
        stream.writeStream.format("jsworker")
        .option("app", app.name)
        .option("task", "charge")
        .option("key", "order_id")
        .option("servers", app.servers[0])
        .option("checkpointLocation", str(checkpoint))
    )
    for option, value in writes.items():
        out = out.option(option, value)
    return out.trigger(availableNow=True).start()


def stream_facts(url: str, stream: str) -> tuple[int, int]:
    """(messages, last sequence) of ``stream``."""

    async def read() -> tuple[int, int]:
        nc = await nats.connect(url)
        try:
            state = (await nc.jetstream().stream_info(stream)).state
            return int(state.messages), int(state.last_seq)
        finally:
            await nc.close()

    return asyncio.run(read())


def sink_app(url: str, name: str, **options: Any) -> App:
    """The app as its operator declares it: streams provisioned, no worker (jobs stay queued)."""
    app = App(name, url, spark_sinks=True, **options)

    @app.task
    def charge(order_id: int) -> None: ...

    asyncio.run(provisioned(app))
    return app


async def provisioned(app: App) -> None:
    try:
        await app.provision()
    finally:
        await app.aclose()


def test_a_committed_batch_run_again_after_the_duplicate_window_makes_no_job(
    session: Any, nats_server_module: NatsServer, tmp_path: Path
) -> None:
    url = nats_server_module.url
    app = sink_app(url, "sparksink", duplicate_window=1.0)
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    orders_file(source, "a", range(300))
    orders_file(source, "b", range(300, 500))
    start_query(session, app, source, checkpoint).awaitTermination(120)
    assert stream_facts(url, "JSW_SPARKSINK") == (500, 500)
    assert stream_facts(url, "JSW_SPARKSINK_SINKS")[0] == 2  # one record a committed batch

    # The query stopped after the sink committed batch 1 and before Spark noted it: restarted,
    # Spark runs batch 1 again. Past the duplicate window only the batch's record stops it.
    for noted in ("1", ".1.crc"):
        (checkpoint / "commits" / noted).unlink(missing_ok=True)
    past = time.time() + 1.5
    wait_until(lambda: time.time() > past, timeout=5, message="the duplicate window to pass")
    start_query(session, app, source, checkpoint).awaitTermination(120)
    assert stream_facts(url, "JSW_SPARKSINK") == (500, 500)

    # A new batch after the restart is written as any.
    orders_file(source, "c", range(500, 520))
    start_query(session, app, source, checkpoint).awaitTermination(120)
    assert stream_facts(url, "JSW_SPARKSINK") == (520, 520)


def test_a_query_stopped_during_a_batch_and_restarted_makes_each_job_once(
    session: Any, nats_server_module: NatsServer, tmp_path: Path
) -> None:
    url = nats_server_module.url
    app = sink_app(url, "sparkstop")
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    orders_file(source, "a", range(20_000))
    query = start_query(session, app, source, checkpoint, window="1")
    wait_until(lambda: stream_facts(url, "JSW_SPARKSTOP")[0] > 0, timeout=60, message="the first jobs")
    query.stop()  # during the batch: its jobs are partly written, the batch not committed
    written = stream_facts(url, "JSW_SPARKSTOP")[0]
    assert 0 < written < 20_000
    start_query(session, app, source, checkpoint).awaitTermination(300)
    assert stream_facts(url, "JSW_SPARKSTOP") == (20_000, 20_000)  # each key once


def test_the_sink_makes_its_batches_stream_where_it_may(
    session: Any, nats_server_module: NatsServer, tmp_path: Path
) -> None:
    """On a server without authentication the sink makes the stream an operator would have
    provisioned (with ``App(spark_sinks=True)``)."""
    url = nats_server_module.url
    app = App("sparkself", url)
    orders_file(tmp_path / "in", "a", range(3))
    start_query(session, app, tmp_path / "in", tmp_path / "checkpoint").awaitTermination(120)
    assert stream_facts(url, "JSW_SPARKSELF") == (3, 3)
    assert stream_facts(url, Namespace(app.name).sinks_stream)[0] == 1


def test_where_the_sink_may_not_make_its_stream_it_says_what_to_declare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a producer's printed credentials the sink cannot make the stream: it fails before
    writing anything, naming ``App(spark_sinks=True)`` and the provisioning step."""
    for role in ROLES:
        monkeypatch.setenv(f"PERM_{role.upper()}_PASSWORD", PASSWORD.format(f"perm-{role}"))
    server = server_with(tmp_path, server_config(["perm"]))
    try:
        provision(server.url, "perm_app")  # the app's streams, without the sinks stream
        settings = WriteSettings.from_options(
            {"app": "perm", "task": "charge", "key": "order_id", "servers": server.url,
             "user": "perm-producer", "password": PASSWORD.format("perm-producer")}
        )  # fmt: skip
        with pytest.raises(ConfigurationError, match=r"App\('perm', spark_sinks=True\).*jsworker provision"):
            asyncio.run(ensure_sink_stream(settings))
    finally:
        server.stop()
