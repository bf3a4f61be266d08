"""Stream replicas come from configuration (JSWORKER_REPLICAS, `jsworker run --replicas`), and
an existing stream's replicas are reported, never changed, by a worker; scaling up in place
(as deploy/README.md documents) takes the consumers along."""

from __future__ import annotations

import re
from pathlib import Path

import nats
import pytest

from jsworker import App
from jsworker.testing import NatsCluster

from ..support import wait_until, wait_until_async
from .workers import start_worker, stop

pytestmark = pytest.mark.anyio

# acceptance_app's App("acc"): the streams and its queue's consumer.
STREAMS = ("JSW_ACC", "JSW_ACC_DLQ", "KV_jsw_acc_jobs", "JSW_ACC_SCHED", "JSW_ACC_CLAIMS")
# A worker also makes the registry's bucket, with the app's replicas too.
WORKER_STREAMS = (*STREAMS, "KV_jsw_acc_workers")
CONSUMER = ("JSW_ACC", "default")


async def _replicas(url: str, streams: tuple[str, ...] = STREAMS) -> dict[str, int]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        found = {name: (await js.stream_info(name)).config.num_replicas or 1 for name in streams}
        consumer = await js.consumer_info(*CONSUMER)
        # A consumer created without num_replicas follows its stream; the server reports
        # the effective figure in its cluster replicas (the leader is not among them).
        found["consumer"] = 1 + len((consumer.cluster.replicas if consumer.cluster else None) or [])
        return found
    finally:
        await nc.close()


def _logged(worker_log: Path, *events: str) -> str | None:
    """The log's text once every one of ``events`` is in it."""
    text = worker_log.read_text(errors="replace")
    return text if all(event in text for event in events) else None


async def test_replicas_come_from_the_environment_and_the_flag_wins(
    nats_cluster: NatsCluster, tmp_path: Path
) -> None:
    """A worker with JSWORKER_REPLICAS=3 creates R3 streams and consumers; a second worker told
    --replicas 1 (the flag wins over the variable) warns that the streams have 3 and leaves them."""
    url = nats_cluster.urls[0]
    urls = ",".join(nats_cluster.urls)
    env = {"JSWORKER_REPLICAS": "3", "JSWORKER_URL": urls}
    first_log = tmp_path / "first.log"
    first = start_worker(urls, tmp_path / "rec", first_log, "--log-level", "info", env=env)
    try:
        wait_until(
            lambda: _logged(first_log, "worker.started"), timeout=60, message="the first worker to start"
        )
    finally:
        assert stop(first) == 0, first_log.read_text()
    assert "replicas_differ" not in first_log.read_text()
    assert await _replicas(url, WORKER_STREAMS) == {**dict.fromkeys(WORKER_STREAMS, 3), "consumer": 3}

    second_log = tmp_path / "second.log"
    second = start_worker(
        urls, tmp_path / "rec", second_log, "--log-level", "info", "--replicas", "1", env=env
    )
    try:
        text = wait_until(
            lambda: _logged(second_log, "worker.started", "replicas_differ"),
            timeout=60,
            message="the second worker's warning",
        )
    finally:
        assert stop(second) == 0, second_log.read_text()
    assert text is not None
    for stream in STREAMS:
        assert re.search(rf"stream {stream} has 3 replica\(s\), the app is configured for 1", text), text
    assert await _replicas(url) == {**dict.fromkeys(STREAMS, 3), "consumer": 3}


@pytest.mark.slow
async def test_scaling_a_stream_up_in_place_takes_its_consumers_along(nats_cluster: NatsCluster) -> None:
    """R1 streams made by a default app, then scaled as deploy/README.md says (a stream update
    with 3 replicas): the stream and the queue's consumer end up with 3, and an app configured
    for 3 no longer finds a difference."""
    url = nats_cluster.urls[0]
    one = App("acc", nats_cluster.urls)
    three = App("acc", nats_cluster.urls, replicas=3)
    for app in (one, three):

        @app.task
        async def noop() -> None: ...

    try:
        assert await one.provision() == []
        assert await _replicas(url) == {**dict.fromkeys(STREAMS, 1), "consumer": 1}
        differ = await three.provision()
        assert [(d.stream, d.current, d.wanted) for d in differ] == [(s, 1, 3) for s in STREAMS]
        assert await _replicas(url) == {**dict.fromkeys(STREAMS, 1), "consumer": 1}

        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            for stream in STREAMS:
                config = (await js.stream_info(stream)).config
                config.num_replicas = 3
                await js.update_stream(config)
        finally:
            await nc.close()

        async def scaled() -> bool:
            return await _replicas(url) == {**dict.fromkeys(STREAMS, 3), "consumer": 3}

        await wait_until_async(scaled, timeout=30, message="the stream and consumer at 3 replicas")
        assert await three.provision() == []
    finally:
        await one.aclose()
        await three.aclose()
