"""Least privilege against a real server: users that hold exactly the permissions
``jsworker permissions`` prints for their role can do their work, and nothing more.

The server runs with the printed ``authorization`` block (apps ``perm`` and ``other``) and one
unrestricted ``admin`` user the tests observe with.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from jsworker import App, EnqueueError, PermissionDeniedError
from jsworker._core.permissions import server_config
from jsworker._core.queues import QueueStatus, queue_status
from jsworker.jetstream.api import api_subject, request_json
from jsworker.jetstream.connection import Connection
from jsworker.testing import NatsServer

from ..support import connections, wait_until, wait_until_async
from .secured import ADMIN, PASSWORD
from .secured import as_user as _as
from .secured import provision as _provision
from .secured import provision_as_admin as _provision_as_admin
from .secured import role_app as _app
from .secured import role_cli as _cli
from .secured import server_with as _server
from .workers import records, start_worker, stop


async def _admin_stream_exists(url: str, stream: str) -> bool:
    nc = await nats.connect(url, user=ADMIN[0], password=ADMIN[1])
    try:
        await nc.jetstream().stream_info(stream)
        return True
    except nats.js.errors.NotFoundError:
        return False
    finally:
        await nc.close()


async def _admin_ids(url: str, stream: str) -> list[str]:
    """The job ids stored in ``stream``, read as ``admin``."""
    nc = await nats.connect(url, user=ADMIN[0], password=ADMIN[1])
    try:
        js = nc.jetstream()
        state = (await js.stream_info(stream)).state
        ids = []
        for seq in range(state.first_seq, state.last_seq + 1 if state.messages else 0):
            msg = await js.get_msg(stream, seq)
            ids.append((msg.headers or {}).get("Jsw-Job-Id") or (msg.headers or {}).get("Nats-Msg-Id", ""))
        return ids
    finally:
        await nc.close()


async def _admin_stream_appears(url: str, stream: str) -> None:
    await wait_until_async(lambda: _admin_stream_exists(url, stream), timeout=20)


def _dead_letter_ids(url: str) -> list[str]:
    return asyncio.run(_admin_ids(url, "JSW_PERM_DLQ"))


@pytest.mark.slow
def test_each_role_does_its_work(secured: NatsServer, tmp_path: Path) -> None:
    """A provisioner, a worker, a producer and an operator, each with only its role's
    permissions: the provisioner makes the streams, the worker runs jobs and keeps its registry
    entry, the producer enqueues, the
    operator reads status and the live workers, lists and replays dead letters and exports
    events; nobody is refused anything."""
    url, record, log = secured.url, tmp_path / "record", tmp_path / "worker.log"
    _provision(url)
    worker = start_worker(url, record, log, "--log-level", "info", module="perm_app", env=_as("perm-worker"))
    try:
        wait_until(lambda: asyncio.run(_admin_stream_exists(url, "JSW_PERM_EVENTS")), timeout=20)
        producer = _app(url, "perm-producer")
        added = producer.tasks["add"].delay(2, 3)
        refused = producer.tasks["refuse"].delay()
        producer.close()
        wait_until(lambda: len(records(record)) == 2, timeout=20)
        wait_until(lambda: _dead_letter_ids(url) == [refused.id], timeout=20)

        status = _cli(url, "perm-operator", "status", "perm_app", "--json")
        assert status.returncode == 0, status.stderr
        assert [(row["queue"], row["workers"]) for row in map(json.loads, status.stdout.splitlines())] == [
            ("default", 1),
            ("gated", 1),
        ]
        # The worker keeps its registry entry, the operator reads it.
        live = _cli(url, "perm-operator", "workers", "perm_app", "--json")
        assert live.returncode == 0, live.stderr
        assert [json.loads(line)["pid"] for line in live.stdout.splitlines()] == [worker.pid]
        listed = _cli(url, "perm-operator", "dlq", "list", "perm_app")
        assert listed.returncode == 0 and refused.id in listed.stdout, listed.stderr
        shown = _cli(url, "perm-operator", "dlq", "show", "perm_app", refused.id)
        assert shown.returncode == 0 and "refused on purpose" in shown.stdout, shown.stderr
        replayed = _cli(url, "perm-operator", "dlq", "replay", "perm_app", refused.id)
        assert replayed.returncode == 0, replayed.stderr
        wait_until(lambda: len(records(record)) == 3, timeout=20)
        exported = _cli(
            url,
            "perm-operator",
            "events",
            "export",
            "perm_app",
            "--from-seq",
            "1",
            "--to",
            str(tmp_path / "events"),
        )
        assert exported.returncode == 0, exported.stderr
    finally:
        assert stop(worker) == 0
    text = log.read_text()
    assert "permission" not in text.lower(), text
    assert added.id in {job for job, _, _ in records(record)}


async def _eavesdrop(url: str, user: str, subjects: list[str]) -> tuple[list[str], list[object], Client]:
    """Subscribe as ``user`` to ``subjects``: the refusals the server sends, what arrives, and
    the connection (to close)."""
    errors: list[str] = []
    got: list[object] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    async def on_msg(msg: Msg) -> None:
        got.append(msg.subject)

    nc = await nats.connect(url, user=user, password=PASSWORD.format(user), error_cb=on_error)
    for subject in subjects:
        await nc.subscribe(subject, cb=on_msg)
    await nc.flush()
    return errors, got, nc


def test_producer_cannot_read_jobs(secured: NatsServer, tmp_path: Path) -> None:
    """The server refuses a producer every subscription through which jobs travel: its own
    app's worker inbox, the other app's, nats-py's default ``_INBOX.``, the job subjects;
    and while a worker runs jobs, nothing reaches the producer."""
    url, record, log = secured.url, tmp_path / "record", tmp_path / "worker.log"
    spied = ["_jsw_inbox.perm.worker.>", "_jsw_inbox.>", "_INBOX.>", "jsw.perm.q.>", ">"]
    _provision(url)
    worker = start_worker(url, record, log, module="perm_app", env=_as("perm-worker"))
    try:

        async def scenario() -> tuple[list[str], list[str], list[object]]:
            own = await _eavesdrop(url, "perm-producer", spied)
            other = await _eavesdrop(url, "other-producer", ["_jsw_inbox.perm.>", "jsw.perm.>"])
            await _admin_stream_appears(url, "JSW_PERM")
            app = _app(url, "perm-producer")
            for n in range(5):
                await app.tasks["add"].adelay(n, n)
            await app.aclose()
            await asyncio.to_thread(lambda: wait_until(lambda: len(records(record)) == 5, timeout=20))
            await own[2].close()
            await other[2].close()
            return own[0], other[0], own[1] + other[1]

        own_refusals, other_refusals, received = asyncio.run(scenario())
    finally:
        stop(worker)
    assert received == []
    for subject in spied:
        # nats-py reports the server's line in lower case.
        assert any(f'subscription to "{subject.lower()}"' in e for e in own_refusals), (subject, own_refusals)
    assert len(other_refusals) == 2, other_refusals


def test_producer_cannot_purge_consume_or_read_dead_letters(secured: NatsServer) -> None:
    """What a producer may not do fails at once with the refused subject named: no 20 s of
    retries ending in "may have been stored"."""
    url = secured.url

    _provision(url)

    async def scenario() -> None:
        worker_app = _app(url, "perm-worker")
        conn = await Connection.open(worker_app.connect_options("worker"))
        await worker_app.provision(conn, ["default"])
        producer = _app(url, "perm-producer")
        await producer.tasks["add"].adelay(1, 2)
        await producer.aclose()

        # What a worker exports about its queues, read with a job waiting (the oldest job's
        # age is read only then), and what `status` shows, each with its own role. The
        # consumer counts the job as pending a moment after the server acked it.
        async def default_queue() -> QueueStatus:
            (seen,) = [q for q in await queue_status(worker_app, conn) if q.queue == "default"]
            return seen

        seen = await wait_until_async(
            default_queue, until=lambda q: q.pending == 1, message="one job pending"
        )
        assert seen.oldest_pending_age is not None
        await conn.close()
        operator = _app(url, "perm-operator")
        (shown,) = [q for q in await queue_status(operator) if q.queue == "default"]
        assert shown.pending == 1 and shown.oldest_pending_age is not None
        conn = await Connection.open(producer.connect_options("producer"))
        try:
            with pytest.raises(PermissionDeniedError) as purge:
                await request_json(conn, api_subject("STREAM.PURGE", "JSW_PERM"), {})
            assert purge.value.subject == "$JS.API.STREAM.PURGE.JSW_PERM"
            with pytest.raises(PermissionDeniedError) as consume:
                await request_json(
                    conn, api_subject("CONSUMER.MSG.NEXT", "JSW_PERM", "default"), {"batch": 1}
                )
            assert consume.value.operation == "publish"
        finally:
            await conn.close()
        # A producer of another app enqueues nothing here, and is told why.
        stranger = _app(url, "other-producer")
        with pytest.raises(EnqueueError, match=r"permission denied.*'jsw\.perm\.q\.default\.add\.\w+'"):
            await stranger.tasks["add"].adelay(1, 1)
        with pytest.raises(EnqueueError, match="permission denied"):
            await stranger.tasks["add"].adelay_many([(1, 1)] * 3)
        await stranger.aclose()

    asyncio.run(scenario())
    dlq = _cli(url, "perm-producer", "dlq", "list", "perm_app")
    assert dlq.returncode == 3, dlq.stderr
    assert "permission denied" in dlq.stderr and "JSW_PERM_DLQ" in dlq.stderr, dlq.stderr


def test_custom_inbox_prefix(secured: NatsServer, tmp_path: Path) -> None:
    """A producer whose permissions were printed for another inbox prefix is refused its
    replies at once; one whose prefix matches the permissions enqueues."""
    prefixed = server_config(["perm"], ("producer",), inbox_prefix="corp.replies.perm")
    server = _server(tmp_path, prefixed.replace("perm-producer", "prefixed"))
    try:
        asyncio.run(_provision_as_admin(server.url))

        async def enqueue(prefix: str | None) -> int:
            app = App(
                "perm",
                server.url,
                user="prefixed",
                password=PASSWORD.format("perm-producer"),
                inbox_prefix=prefix,
            )

            @app.task
            async def add(a: int, b: int) -> int:
                return a + b

            try:
                return (await add.adelay(1, 2)).seq
            finally:
                await app.aclose()

        refused = r"permission denied.*subscribe on '_jsw_inbox\.perm\.producer\..*may have been stored"
        with pytest.raises(EnqueueError, match=refused):
            asyncio.run(enqueue(None))
        # The refused producer's job was stored: only its acknowledgement could not come back.
        assert asyncio.run(enqueue("corp.replies.perm")) == 2
    finally:
        server.stop()


def test_a_worker_refused_its_pulls_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker whose user may not pull logs, naming the refused subject, that its queue's
    pull loop stopped, instead of sitting silent."""
    for role in ("worker", "provisioner"):
        monkeypatch.setenv(f"PERM_{role.upper()}_PASSWORD", PASSWORD.format(f"perm-{role}"))
    block = server_config(["perm"], ("worker", "provisioner"))
    pull = '"$JS.API.CONSUMER.MSG.NEXT.JSW_PERM.*", '
    assert pull in block
    server = _server(tmp_path, block.replace(pull, ""))
    _provision(server.url)
    record, log = tmp_path / "record", tmp_path / "worker.log"
    worker = start_worker(server.url, record, log, module="perm_app", env=_as("perm-worker"))
    try:
        wait_until(
            lambda: "queue.pull_stopped" in log.read_text() and "permission denied" in log.read_text(),
            timeout=20,
            message="the worker to report its refused pulls",
        )
        assert "$JS.API.CONSUMER.MSG.NEXT.JSW_PERM.default" in log.read_text()
        assert worker.poll() is None
    finally:
        stop(worker)
        server.stop()


def _producer_published(server: NatsServer) -> bool:
    """Whether the producer's connection has sent the server anything beyond its set-up."""
    return any(
        c.get("name") == "jsworker:perm:producer" and c.get("in_msgs", 0) > 0
        for c in connections(server.monitoring_url)
    )


def test_a_producer_waits_for_the_provisioning_step(secured: NatsServer, tmp_path: Path) -> None:
    """A producer may not create streams: an enqueue sent before the provisioning step has made
    them waits for it (within publish_timeout) instead of failing at once, as it does while a
    stream's leader moves. With no provisioning at all it fails, naming the step."""
    url, record = secured.url, tmp_path / "record"
    producer = _app(url, "perm-producer")
    worker = None
    try:
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(producer.tasks["add"].delay, 2, 3)
            wait_until(lambda: _producer_published(secured), timeout=10, message="the producer's first try")
            assert not pending.done()
            _provision(url)
            job = pending.result(timeout=30)
        worker = start_worker(url, record, tmp_path / "worker.log", module="perm_app", env=_as("perm-worker"))
        wait_until(lambda: [job_id for job_id, _, _ in records(record)] == [job.id], timeout=20)
    finally:
        producer.close()
        if worker is not None:
            assert stop(worker) == 0

    alone = _app(url, "other-producer", "other")
    alone.configure_options(publish_timeout=1)
    try:
        with pytest.raises(
            EnqueueError,
            match=r"within 1s, and this user may not create the app's streams \(run `jsworker provision`",
        ):
            alone.tasks["add"].delay(1, 2)
    finally:
        alone.close()
    assert not asyncio.run(_admin_stream_exists(url, "JSW_OTHER"))
