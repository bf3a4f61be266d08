"""The worker registry against a real server: the announcer's entry (written, refreshed, made
again when its bucket is lost, removed), ``jsworker workers`` listing real worker processes as
a table and as JSON Lines, the WORKERS column of ``jsworker status``, and a clean stop that
takes a worker out of the list at once. A worker killed with -9 is tests/faults/test_registry.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats.js.errors
import pytest

from jsworker import App, __version__
from jsworker._registry.entries import WorkerEntry, live_workers
from jsworker._runtime.announcer import WorkerAnnouncer
from jsworker.jetstream.connection import Connection
from jsworker.testing import NatsServer

from .. import launcher
from ..support import connected, wait_until, wait_until_async
from .workers import APPS, cli, records, start_worker, stop

sys.path.insert(0, str(APPS))
import acceptance_app


@dataclass
class _Settings:
    concurrency: int


@dataclass
class _Worker:
    """What the announcer reads of a worker, set by hand."""

    queues: list[str]
    settings: _Settings
    in_flight: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    quiet_since: float | None = None


async def _kv_entry(url: str, bucket: str, key: str) -> dict[str, Any] | None:
    """The entry under ``key`` as nats-py's key-value client reads it: None when deleted or gone."""
    async with connected(url) as nc:
        kv = await nc.jetstream().key_value(bucket)
        try:
            found = await kv.get(key)
        except nats.js.errors.KeyNotFoundError:  # deleted (a delete marker) or never written
            return None
        return json.loads(found.value or b"null")  # type: ignore[no-any-return]


@pytest.mark.anyio
async def test_the_announcer_writes_refreshes_and_removes_its_entry(nats_server: NatsServer) -> None:
    """Counters are read at each write; the entry is a key of a real key-value bucket; after
    remove() it is gone for every reader at once, with nothing written after it."""
    app = App("reg", nats_server.url)
    worker = _Worker(["default", "emails"], _Settings(7), in_flight=2)
    worker.counts.update({"succeeded": 5, "failed": 1, "engine.pull": 40, "event_loop_blocked": 1})
    conn = await Connection.open(app.connect_options("worker"))
    try:
        announcer = WorkerAnnouncer(app, conn, worker, interval=0.2)
        await announcer.start()
        (entry,) = await live_workers(app)
        assert entry == WorkerEntry(
            id=announcer.id,
            host=socket.gethostname(),
            pid=os.getpid(),
            version=__version__,
            queues=("default", "emails"),
            concurrency=7,
            running=2,
            done=6,  # settled jobs only: the pull loop's and event loop's counts are no jobs
            started_at=announcer.started_at,
            seen_at=entry.seen_at,
            outcomes={"succeeded": 5, "failed": 1},
        )
        assert await _kv_entry(nats_server.url, "jsw_reg_workers", announcer.id) == entry.as_dict()

        refreshing = asyncio.create_task(announcer.run())
        worker.in_flight = 0
        worker.counts["succeeded"] += 10
        (later,) = await wait_until_async(
            lambda: live_workers(app),
            until=lambda found: len(found) == 1 and found[0].done == 16,
            timeout=10,
            message="the refreshed entry",
        )
        assert (later.running, later.outcomes, later.started_at) == (
            0,
            {"succeeded": 15, "failed": 1},
            entry.started_at,
        )
        assert later.seen_at > entry.seen_at

        refreshing.cancel()
        await asyncio.gather(refreshing, return_exceptions=True)
        await announcer.remove()
        assert await live_workers(app) == []
        assert await _kv_entry(nats_server.url, "jsw_reg_workers", announcer.id) is None
        await announcer.start()  # a late write after removal must not bring it back
        assert await live_workers(app) == []
    finally:
        await conn.close()


@pytest.mark.anyio
async def test_a_lost_bucket_is_made_again_at_the_next_refresh(nats_server: NatsServer) -> None:
    """Somebody deletes the bucket (or a server forgets it): the worker's next writes fail,
    nothing stops, and the bucket and the entry are back without a restart."""
    app = App("reg", nats_server.url)
    conn = await Connection.open(app.connect_options("worker"))
    announcer = WorkerAnnouncer(app, conn, _Worker(["default"], _Settings(1)), interval=0.2)
    refreshing = None
    try:
        await announcer.start()
        refreshing = asyncio.create_task(announcer.run())
        async with connected(nats_server.url) as nc:
            await nc.jetstream().delete_stream("KV_jsw_reg_workers")
        await wait_until_async(
            lambda: live_workers(app),
            until=lambda found: [e.id for e in found] == [announcer.id],
            timeout=10,
            message="the entry back in a new bucket",
        )
        assert not refreshing.done()
    finally:
        if refreshing is not None:
            refreshing.cancel()
            await asyncio.gather(refreshing, return_exceptions=True)
        await conn.close()


# -- real worker processes --------------------------------------------------------------------


def _listed(url: str) -> list[dict[str, Any]]:
    """``jsworker workers acceptance_app --json``: one object a worker."""
    result = cli(url, "workers", "acceptance_app", "--json")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return [json.loads(line) for line in result.stdout.splitlines()]


def _by_pid(url: str) -> dict[int, dict[str, Any]]:
    return {row["pid"]: row for row in _listed(url)}


def _status(url: str) -> dict[str, dict[str, Any]]:
    result = cli(url, "status", "acceptance_app", "--json")
    assert result.returncode == 0, result.stderr
    return {row["queue"]: row for row in map(json.loads, result.stdout.splitlines())}


@pytest.fixture
def two_workers(nats_server: NatsServer, tmp_path: Path) -> Iterator[tuple[launcher.Launched, ...]]:
    """Worker A on ``default`` (-c 7) and worker B on ``default`` and ``slow`` (-c 3), both
    listed; each stopped by its pid afterwards."""
    url, record = nats_server.url, tmp_path / "record.log"
    a = start_worker(url, record, tmp_path / "a.log", "--queues", "default", "-c", "7")
    b = start_worker(url, record, tmp_path / "b.log", "--queues", "default,slow", "-c", "3")
    try:
        wait_until(
            lambda: _by_pid(url),
            until=lambda found: {a.pid, b.pid} <= set(found),
            timeout=30,
            message="both workers in the registry",
        )
        yield a, b
    finally:
        stop(a)
        stop(b)


@pytest.mark.slow
def test_workers_lists_every_live_worker_process(
    nats_server: NatsServer, tmp_path: Path, two_workers: tuple[launcher.Launched, ...]
) -> None:
    """JSON Lines with the documented fields, the same workers as a table, and the jobs each
    settled once it refreshed its entry."""
    url = nats_server.url
    a, b = two_workers
    found = _by_pid(url)
    assert set(found) == {a.pid, b.pid}
    for proc, queues, concurrency in ((a, ["default"], 7), (b, ["default", "slow"], 3)):
        row = found[proc.pid]
        assert row["app"] == "acc"
        assert (row["queues"], row["concurrency"], row["host"]) == (queues, concurrency, socket.gethostname())
        assert re.fullmatch(rf"[A-Za-z0-9_-]+-{proc.pid}-[0-9a-f]{{6}}", row["id"]), row["id"]
        assert (row["version"], row["running"], row["done"]) == (__version__, 0, 0)
        assert row["started_at"] <= row["seen_at"]
    assert len({row["id"] for row in found.values()}) == 2

    table = cli(url, "workers", "acceptance_app")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith("app acc  2 live worker(s)")
    assert lines[1].split() == [
        "ID", "HOST", "PID", "VERSION", "QUEUES", "CONCURRENCY", "RUNNING", "DONE", "UP", "SEEN"
    ]  # fmt: skip
    shown = {row[2]: row for row in (line.split() for line in lines[2:])}
    assert set(shown) == {str(a.pid), str(b.pid)}
    assert shown[str(b.pid)][0] == found[b.pid]["id"]
    assert shown[str(b.pid)][4:8] == ["default,slow", "3", "0", "0"]
    assert shown[str(b.pid)][-1] == "ago"

    acceptance_app.app.servers = [url]
    try:
        acceptance_app.record_async.delay_many([(n,) for n in range(6)])
    finally:
        acceptance_app.app.close()
    wait_until(lambda: len(records(tmp_path / "record.log")) == 6, timeout=30, message="six jobs done")
    settled = wait_until(
        lambda: _by_pid(url),
        until=lambda rows: sum(row["done"] for row in rows.values()) == 6,
        timeout=15,  # the entries' next refreshes, 5 s apart
        message="the six jobs in the workers' entries",
    )
    assert sum(row["outcomes"].get("succeeded", 0) for row in settled.values()) == 6


@pytest.mark.slow
def test_status_counts_workers_and_a_clean_stop_leaves_the_list_at_once(
    nats_server: NatsServer, two_workers: tuple[launcher.Launched, ...]
) -> None:
    """WORKERS per queue in ``status`` (table and JSON); worker B stopped with SIGTERM is out
    of the list and of the counts as soon as its process has exited."""
    url = nats_server.url
    a, b = two_workers
    rows = _status(url)
    assert (rows["default"]["workers"], rows["slow"]["workers"]) == (2, 1)
    assert rows["overrun"]["workers"] == 0
    table = cli(url, "status", "acceptance_app").stdout.splitlines()
    assert table[1].split()[-1] == "WORKERS"
    assert {line.split()[0]: line.split()[-1] for line in table[2:] if line.strip()}["default"] == "2"

    assert stop(b) == 0
    assert set(_by_pid(url)) == {a.pid}  # no waiting: the entry went with the process
    rows = _status(url)
    assert (rows["default"]["workers"], rows["slow"]["workers"]) == (1, 0)


def test_no_worker_is_an_empty_list(nats_server: NatsServer) -> None:
    """Before any worker ran (no bucket yet): an empty list, a line saying so, exit 0."""
    assert _listed(nats_server.url) == []
    table = cli(nats_server.url, "workers", "acceptance_app")
    assert table.returncode == 0, table.stderr
    assert "(no live workers" in table.stdout
    assert all(row["workers"] == 0 for row in _status(nats_server.url).values())
