"""jsworker on nats-server releases older than its schedule features, and the upgrade from one.

Delayed jobs need 2.12 (``@at`` message schedules), periodic ones 2.14. On older servers
ordinary jobs must keep working, asking for a missing feature must fail before anything is
stored, naming the release it needs, and streams made there must gain schedules once the same
store is served by a newer release. The old binaries come from ``.ci/old-servers``
(see :mod:`tests.old_servers`).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio.to_thread
import nats.js.errors
import pytest
from nats.js.api import StreamConfig

from jsworker import App, ServerVersionError, current_job
from jsworker._server.binary import find_nats_server
from jsworker.testing import NatsServer

from .. import launcher
from ..old_servers import BEFORE_DELAYED, BEFORE_PERIODIC, OldServerUnavailable, old_server
from ..support import Servers, connected, need, stream_state_async, wait_until, wait_until_async
from .workers import APPS, counts, in_process_worker, stop, worker_env

sys.path.insert(0, str(APPS))
import versions_app

pytestmark = pytest.mark.timeout(120)

# What each app's task saw: (argument, job id, scheduled_for, when it ran).
Ran = list[tuple[int, str, datetime | None, datetime]]


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


@pytest.fixture(scope="session")
def old_binaries() -> dict[str, str]:
    """The old releases' binaries, fetched once per session when not cached; the tests skip
    without them, or fail on CI, where a skip would hide that they never ran."""
    try:
        return old_server(BEFORE_DELAYED, BEFORE_PERIODIC)
    except OldServerUnavailable as exc:
        need(False, f"no old nats-server to test against: {exc}")


def _serve(binary: str, log: Path, store_dir: Path | None = None) -> NatsServer:
    return NatsServer(binary=binary, store_dir=store_dir, log_file=log)


@pytest.fixture
def server_2_11(old_binaries: dict[str, str], tmp_path: Path) -> Iterator[NatsServer]:
    """A nats-server without message schedules."""
    with _serve(old_binaries[BEFORE_DELAYED], tmp_path / "nats-2.11.log") as server:
        yield server


@pytest.fixture
def server_2_12(old_binaries: dict[str, str], tmp_path: Path) -> Iterator[NatsServer]:
    """A nats-server with ``@at`` schedules but no repeating ones."""
    with _serve(old_binaries[BEFORE_PERIODIC], tmp_path / "nats-2.12.log") as server:
        yield server


@pytest.fixture(params=[BEFORE_DELAYED, BEFORE_PERIODIC])
def before_periodic(
    request: pytest.FixtureRequest, old_binaries: dict[str, str], tmp_path: Path
) -> Iterator[tuple[str, NatsServer]]:
    """Each old release (neither has repeating schedules) and a server of it."""
    version: str = request.param
    with _serve(old_binaries[version], tmp_path / f"nats-{version}.log") as server:
        yield version, server


def _app(name: str, url: str, ran: Ran) -> App:
    app = App(name, url)

    @app.task(max_retries=0)
    async def note(n: int) -> None:
        job = current_job()
        ran.append((n, job.id, job.scheduled_for, datetime.now(UTC)))

    return app


async def _stream_config(url: Servers, stream: str) -> StreamConfig:
    async with connected(url) as nc:
        return (await nc.jetstream().stream_info(stream)).config


async def _stream_exists(url: Servers, stream: str) -> bool:
    async with connected(url) as nc:
        try:
            await nc.jetstream().stream_info(stream)
        except nats.js.errors.NotFoundError:
            return False
    return True


def _ran_ids(ran: Ran) -> list[str]:
    return [job_id for _, job_id, _, _ in ran]


# -- 2.11: no schedules at all ----------------------------------------------------------------


@pytest.mark.anyio
async def test_before_2_12_jobs_run_and_delayed_ones_are_refused_before_anything_is_stored(
    server_2_11: NatsServer,
) -> None:
    url = server_2_11.url
    ran: Ran = []
    app = _app("old", url, ran)
    note = app.tasks["note"]
    try:
        async with in_process_worker(app) as worker:
            assert worker.conn is not None and worker.conn.server_version == _release(BEFORE_DELAYED)
            job = await note.adelay(1)
            await wait_until_async(lambda: ran, timeout=20, message="the immediate job to run")
            assert _ran_ids(ran) == [job.id] and ran[0][2] is None and job.scheduled_for is None
            # The task has run; its acknowledgement removes it from the stream just after.
            before = await wait_until_async(
                lambda: stream_state_async(url, "JSW_OLD"),
                until=lambda state: state.messages == 0,
                timeout=10,
                message="the job to be acknowledged",
            )

            have = re.escape(BEFORE_DELAYED)
            needs_2_12 = rf"^delayed jobs needs nats-server >= 2\.12\.0; connected server is {have}$"
            with pytest.raises(ServerVersionError, match=needs_2_12):
                await anyio.to_thread.run_sync(lambda: note.apply((2,), countdown=5))
            with pytest.raises(ServerVersionError, match=needs_2_12):
                await note.aapply((3,), eta=datetime.now(UTC) + timedelta(seconds=5))
            # Cancelling a queued or running job works on any server; no schedule is looked for.
            assert await anyio.to_thread.run_sync(app.cancel, "x") is False
            assert await app.acancel("x") is False

            # Nothing reached the stream: not even a message the server would have taken as
            # a plain one on the schedule subject (where no worker reads).
            assert await stream_state_async(url, "JSW_OLD") == before
            assert len(ran) == 1
        config = await _stream_config(url, "JSW_OLD")
        assert not config.allow_msg_schedules
        assert not await _stream_exists(url, "JSW_OLD_CLAIMS")
    finally:
        await anyio.to_thread.run_sync(app.close)


# -- 2.12: delayed jobs, no periodic ones ---------------------------------------------------


@pytest.mark.anyio
async def test_on_2_12_a_delayed_job_runs_at_its_time_and_one_can_be_cancelled(
    server_2_12: NatsServer,
) -> None:
    url = server_2_12.url
    ran: Ran = []
    app = _app("mid", url, ran)
    note = app.tasks["note"]
    async with in_process_worker(app) as worker:
        assert worker.conn is not None and worker.conn.server_version == _release(BEFORE_PERIODIC)
        later = await note.aapply((2,), countdown=60)
        assert await app.acancel(later.id) is True
        job = await note.aapply((1,), countdown=1)
        assert job.scheduled_for is not None
        await wait_until_async(lambda: ran, timeout=20, message="the delayed job to run")
        # The fired job acknowledged and gone, and the cancelled one's schedule removed.
        await wait_until_async(
            lambda: stream_state_async(url, "JSW_MID"),
            until=lambda state: state.messages == 0,
            timeout=10,
            message="the job stream to be empty",
        )
    [(n, job_id, due, at)] = ran
    assert (n, job_id) == (1, job.id)
    assert due == job.scheduled_for
    assert due is not None and at >= due, "ran before it was due"
    # The job stream, which producers write, honours no schedule; the schedules stream does.
    assert not (await _stream_config(url, "JSW_MID")).allow_msg_schedules
    assert (await _stream_config(url, "JSW_MID_SCHED")).allow_msg_schedules is True
    assert await _stream_exists(url, "JSW_MID_CLAIMS")


def test_a_worker_before_2_14_logs_that_schedules_are_unsupported_and_runs_jobs(
    before_periodic: tuple[str, NatsServer], tmp_path: Path
) -> None:
    version, server = before_periodic
    record, log = tmp_path / "record", tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jsworker", "run", "versions_app", "--log-format", "json",
             "--log-level", "info"],
            env=worker_env(server.url, record), stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    versions_app.app.servers = [server.url]
    try:
        job = versions_app.now.delay(5)
        wait_until(lambda: counts(record)[job.id] == 1, timeout=30, message="the job to run")
        assert proc.poll() is None, "the worker stopped"
    finally:
        code = stop(proc)
        versions_app.app.close()
    assert code == 0, log.read_text()
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    unsupported = [e for e in events if e["event"] == "schedules.unsupported"]
    assert len(unsupported) == 1, events
    assert unsupported[0]["level"] == "error"
    assert unsupported[0]["schedules"] == ["morning_report"]
    assert unsupported[0]["error"] == (
        f"periodic schedules needs nats-server >= 2.14.0; connected server is {version}"
    )
    assert [e["server"] for e in events if e["event"] == "worker.started"] == [version]
    # The job is the only message the stream ever stored: no schedule was written.
    assert anyio.run(stream_state_async, server.url, "JSW_VERSIONS").last_seq == 1


def test_schedules_sync_before_2_14_exits_2_naming_the_release_needed(
    before_periodic: tuple[str, NatsServer],
) -> None:
    version, server = before_periodic
    done = launcher.run(["schedules", "sync", "versions_app"], env=worker_env(server.url), timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: periodic schedules needs nats-server >= 2.14.0; connected server is {version}"
    ], done.stderr


# -- the upgrade: 2.11's store served by the current release ----------------------------------


@pytest.mark.anyio
async def test_streams_made_on_2_11_get_schedules_after_an_upgrade_on_the_same_store(
    old_binaries: dict[str, str], tmp_path: Path
) -> None:
    store = tmp_path / "store"
    old = _serve(old_binaries[BEFORE_DELAYED], tmp_path / "nats-old.log", store)
    await anyio.to_thread.run_sync(old.start)
    try:
        app = _app("upg", old.url, [])
        await app.provision()
        # Stored on 2.11, run after the upgrade: the store carries jobs across.
        waiting = await app.tasks["note"].adelay(1)
        await app.aclose()
        assert not (await _stream_config(old.url, "JSW_UPG")).allow_msg_schedules
        assert not await _stream_exists(old.url, "JSW_UPG_CLAIMS")
    finally:
        await anyio.to_thread.run_sync(old.stop)

    new = _serve(find_nats_server(), tmp_path / "nats-new.log", store)
    await anyio.to_thread.run_sync(new.start)
    try:
        ran: Ran = []
        app = _app("upg", new.url, ran)
        async with in_process_worker(app) as worker:
            assert worker.conn is not None and worker.conn.server_version >= (2, 14, 0)
            await wait_until_async(lambda: ran, timeout=20, message="the job stored on 2.11 to run")
            assert not (await _stream_config(new.url, "JSW_UPG")).allow_msg_schedules
            assert (await _stream_config(new.url, "JSW_UPG_SCHED")).allow_msg_schedules is True
            assert await _stream_exists(new.url, "JSW_UPG_CLAIMS")
            delayed = await app.tasks["note"].aapply((2,), countdown=1)
            await wait_until_async(lambda: len(ran) == 2, timeout=20, message="the delayed job to run")
        assert _ran_ids(ran) == [waiting.id, delayed.id]
        due, at = ran[1][2], ran[1][3]
        assert due == delayed.scheduled_for
        assert due is not None and at >= due, "ran before it was due"
    finally:
        await anyio.to_thread.run_sync(new.stop)
