"""Schedules the server refuses, on a real nats-server: one refused schedule is logged and
skipped while every other one is installed, and the bounds declarations are held to are the
server's own (the same writes, without jsworker's checks, are accepted or refused at exactly
those bounds)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from jsworker import App
from jsworker._config import LATEST_TEXT
from jsworker._scheduling.admin import Schedules
from jsworker._scheduling.cron import MAX_EVERY, Cron, go_duration
from jsworker._scheduling.declare import Schedule
from jsworker._scheduling.periodic import (
    MAX_HEADER_BLOCK,
    SchedulesRefused,
    read_schedules,
    write_message,
    written_header_block,
)
from jsworker._wire.headers import SCHEDULE, SCHEDULE_TARGET, SCHEDULE_TIME_ZONE
from jsworker.jetstream.connection import Connection
from jsworker.jetstream.message import OutMessage
from jsworker.jetstream.stored import WriteRefused
from jsworker.testing import NatsServer

from .. import launcher
from ..support import wait_until_async
from .workers import in_process_worker, worker_env

pytestmark = pytest.mark.anyio

# An argument over the server's max_payload (1 MiB by default): declaring cannot know the
# server's limit, so such a schedule is declared and refused when it is installed.
BIG = "x" * (1 << 20)
INSTALLED = ["first", "middle", "last"]


def _app(url: str) -> App:
    """Five schedules, a refused one after the first and another after the second: a
    sub-second interval built by hand (declaring refuses it; the server does too) and one
    whose arguments are over max_payload."""
    app = App("refusals", url)

    @app.task
    async def tick(label: str) -> None: ...

    app.schedule(tick, every=60, name="first", args=("first",))
    # Past the declaration's checks, as code that builds a Schedule itself would be.
    app.schedules["sub-second"] = Schedule(
        name="sub-second", task="tick", queue="default", every=0.5, body=app.schedules["first"].body
    )
    app.schedule(tick, cron="0 7 * * *", tz="Europe/Berlin", name="middle", args=("middle",))
    app.schedule(tick, every=60, name="oversized", args=(BIG,))
    app.schedule(tick, every=3600, name="last", args=("last",))
    return app


async def test_a_refused_schedule_is_logged_and_skipped_and_the_others_are_installed(
    nats_server: NatsServer,
) -> None:
    app = _app(nats_server.url)
    with structlog.testing.capture_logs() as logs:
        async with in_process_worker(app) as worker:

            def refused() -> dict[str, str]:
                return {e["schedule"]: e["reason"] for e in logs if e["event"] == "schedule.refused"}

            found = await wait_until_async(
                refused, until=lambda r: len(r) == 2, timeout=30, message="two schedules refused"
            )
            # Read on the server, not from the info log, which an earlier test in this process
            # may have left filtered out (a logger configured at "warning" keeps that level).
            conn = worker.conn
            assert conn is not None
            on_server = await wait_until_async(
                lambda: read_schedules(app, conn),
                until=lambda schedules: sorted(schedules) == sorted(INSTALLED),
                timeout=30,
                message="the others installed",
            )
    assert {s.expression for s in on_server.values()} == {"@every 60s", "0 0 7 * * *", "@every 3600s"}
    assert "message schedules pattern is invalid" in found["sub-second"]  # the server's own words
    assert "max_payload" in found["oversized"]  # never sent: the server would close the connection
    assert BIG[:100] not in repr(logs)  # names and reasons only, never a schedule's arguments
    assert not [e for e in logs if e["event"] == "schedules.install_failed"]


async def test_syncing_from_python_installs_the_rest_then_names_the_refused(nats_server: NatsServer) -> None:
    app = _app(nats_server.url)
    async with Schedules(app) as schedules:
        with pytest.raises(SchedulesRefused, match="2 schedule\\(s\\) not installed") as caught:
            await schedules.sync()
        report = caught.value.report
        assert report.created == INSTALLED and sorted(report.refused) == ["oversized", "sub-second"]
        assert sorted(s.name for s in await schedules.list()) == sorted(INSTALLED)
        with pytest.raises(SchedulesRefused) as again:
            await schedules.sync()
        assert again.value.report.unchanged == INSTALLED  # the installed ones are left alone


CLI_APP = """
from jsworker import App

app = App("clirefusals")


@app.task
def tick(label: str) -> None: ...


app.schedule(tick, every=60, name="first", args=("first",))
app.schedule(tick, every=60, name="oversized", args=("x" * (1 << 20),))
app.schedule(tick, every=3600, name="last", args=("last",))
"""


async def test_the_sync_command_installs_the_rest_and_exits_2_naming_the_refused(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    (tmp_path / "refusing_app.py").write_text(CLI_APP)
    env = worker_env(nats_server.url)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])

    def jsworker(*args: str) -> subprocess.CompletedProcess[str]:
        return launcher.run(args, env=env, timeout=60)

    synced = await asyncio.to_thread(jsworker, "schedules", "sync", "refusing_app")
    assert synced.returncode == 2, synced.stderr
    assert "1 schedule(s) not installed ('oversized': " in synced.stderr and "max_payload" in synced.stderr
    assert "x" * 100 not in synced.stderr + synced.stdout  # the arguments are not echoed
    listed = await asyncio.to_thread(jsworker, "schedules", "list", "refusing_app", "--json")
    assert listed.returncode == 0, listed.stderr
    assert sorted(json.loads(line)["name"] for line in listed.stdout.splitlines()) == ["first", "last"]


# -- the bounds are the server's ----------------------------------------------------------


@pytest.fixture
async def raw(nats_server: NatsServer) -> AsyncIterator[tuple[App, Connection]]:
    """An app with its streams, and a connection writing to them without jsworker's checks."""
    app = App("bounds", nats_server.url)
    conn = await Connection.open(app.connect_options("worker"))
    try:
        await app.provision_streams(conn)
        yield app, conn
    finally:
        await conn.close()
        await app.aclose()


async def _verdict(app: App, conn: Connection, name: str, headers: dict[str, str]) -> int:
    """0 when the server stores a schedule with ``headers`` on ``name``, else its error code."""
    sent = {
        SCHEDULE_TARGET: app.namespace.fired_subject(app.namespace.job_subject("default", "tick")),
        **headers,
    }
    try:
        await write_message(conn, OutMessage(app.namespace.periodic_subject(name), b"", sent), 0)
    except WriteRefused as exc:
        return exc.err_code
    return 0


PATTERN_INVALID, ZONE_INVALID, HEADERS_OVER = 10189, 10223, 10097


@pytest.mark.parametrize(
    ("headers", "verdict"),
    [
        pytest.param({SCHEDULE: "@every 1s"}, 0, id="every-1s"),
        pytest.param({SCHEDULE: "@every 999ms"}, PATTERN_INVALID, id="every-999ms"),
        pytest.param({SCHEDULE: f"@every {go_duration(MAX_EVERY)}"}, 0, id="every-max"),
        pytest.param(
            {SCHEDULE: f"@every {go_duration(MAX_EVERY + 0.001)}"}, PATTERN_INVALID, id="every-max+1ms"
        ),
        pytest.param({SCHEDULE: Cron.parse("59 23 31 2 *").expression}, PATTERN_INVALID, id="cron-feb-31"),
        pytest.param({SCHEDULE: Cron.parse("0 0 29 2 *").expression}, 0, id="cron-feb-29"),
        pytest.param({SCHEDULE: "@at " + LATEST_TEXT}, 0, id="at-last-ms-of-9999"),
        pytest.param({SCHEDULE: "@at 10000-01-01T00:00:00Z"}, PATTERN_INVALID, id="at-10000"),
        # The server takes it as its host's own zone: why declaring refuses it (and
        # "localtime", which the server finds wherever its zoneinfo has that link).
        pytest.param({SCHEDULE: "0 0 7 * * *", SCHEDULE_TIME_ZONE: "Local"}, 0, id="tz-Local"),
        pytest.param(
            {SCHEDULE: "0 0 7 * * *", SCHEDULE_TIME_ZONE: "Europe/../UTC"}, ZONE_INVALID, id="tz-dotdot"
        ),
    ],
)
async def test_the_server_refuses_exactly_past_the_bounds_declared_here(
    raw: tuple[App, Connection], headers: dict[str, str], verdict: int
) -> None:
    app, conn = raw
    assert await _verdict(app, conn, "probe", headers) == verdict


async def test_the_header_block_counted_here_is_the_one_the_server_limits(
    raw: tuple[App, Connection],
) -> None:
    """Padded to exactly :data:`MAX_HEADER_BLOCK` as counted by ``written_header_block`` (the
    server adds ``Nats-Rollup: sub`` to a schedule before it checks): stored; a byte more:
    refused."""
    app, conn = raw

    def padded(extra: int) -> dict[str, Any]:
        headers = {
            SCHEDULE: "@every 60s",
            SCHEDULE_TARGET: app.namespace.fired_subject(app.namespace.job_subject("default", "tick")),
        }
        base = written_header_block(OutMessage("s", b"", {**headers, "X-Pad": ""}), 0)
        return {**headers, "X-Pad": "p" * (MAX_HEADER_BLOCK - base + extra)}

    at_limit, over = padded(0), padded(1)
    assert written_header_block(OutMessage("s", b"", at_limit), 0) == MAX_HEADER_BLOCK
    assert await _verdict(app, conn, "at-limit", at_limit) == 0
    assert await _verdict(app, conn, "over-limit", over) == HEADERS_OVER
