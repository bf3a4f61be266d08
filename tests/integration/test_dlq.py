"""Dead letters you can work with: list, get, replay and purge, through the API and the CLI.

Dead letters are made the real way: a ``jsworker run`` process runs ``dlq_app``, whose tasks
fail while the file named by ``JSW_TEST_BROKEN`` exists; deleting it is the fix a replay needs.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import nats
import pytest

from jsworker import ConfigurationError, SerializationError
from jsworker._deadletters import (
    REPLAYED_FROM,
    DeadLetter,
    DeadLetterNotFound,
    DeadLetterNotReplayable,
    DeadLetters,
    ReplayedJob,
)
from jsworker._deadletters.format import dead_letter_message
from jsworker._wire.names import Namespace
from jsworker.jetstream.limits_stream import LimitsStream
from jsworker.testing import NatsServer, parse_execution

from .. import launcher
from ..support import REFUSED_QUICKLY, stream_messages, wait_consumer_settled, wait_until
from .workers import APPS, start_worker, stop, worker_env

sys.path.insert(0, str(APPS))
import dlq_app

T = TypeVar("T")


@pytest.fixture
def broken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The bug flag: dlq_app's tasks fail while this file exists (workers inherit the env)."""
    flag = tmp_path / "broken"
    flag.touch()
    monkeypatch.setenv("JSW_TEST_BROKEN", str(flag))
    return flag


@pytest.fixture
def record(tmp_path: Path) -> Path:
    """The file worker processes record successful executions in."""
    return tmp_path / "record.log"


@pytest.fixture
def app(nats_server: NatsServer) -> Iterator[Any]:
    """dlq_app, producing to this test's server."""
    dlq_app.app.servers = [nats_server.url]
    yield dlq_app
    dlq_app.app.close()


@pytest.fixture
def worker(nats_server: NatsServer, app: Any, broken: Path, record: Path, tmp_path: Path) -> Iterator[Any]:
    """A ``jsworker run dlq_app`` process for the test."""
    proc = start_worker(nats_server.url, record, tmp_path / "worker.log", module="dlq_app")
    yield proc
    stop(proc)


def dlq(work: Callable[[DeadLetters], Awaitable[T]]) -> T:
    """Run ``work`` on dlq_app's dead letters over a fresh connection."""

    async def main() -> T:
        async with DeadLetters(dlq_app.app) as letters:
            return await work(letters)

    return asyncio.run(main())


def wait_for_letters(n: int) -> None:
    """Wait until the dead-letter stream holds ``n`` dead letters."""
    wait_until(
        lambda: dlq(lambda d: d.count()),
        until=lambda count: count == n,
        timeout=20,
        message=f"{n} dead letters",
    )


def executions(record: Path) -> Counter[tuple[str, int]]:
    """How often each (job id, attempt) ran to completion."""
    if not record.exists():
        return Counter()
    runs = (parse_execution(line) for line in record.read_text().splitlines())
    return Counter((r.job_id, r.attempt) for r in runs if r is not None)


def cli(url: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``jsworker dlq ARGS`` in a subprocess, stdin not a terminal (``env`` added to its environment)."""
    return launcher.run(["dlq", *args], env={**worker_env(url), **(env or {})}, timeout=30)


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single ``error: ...`` line a failed command prints."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


async def publish_raw(url: str, items: list[tuple[str, bytes, dict[str, str]]]) -> None:
    """Publish messages straight to JetStream, as a buggy producer would."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for subject, body, headers in items:
            await js.publish(subject, body, headers=headers)
    finally:
        await nc.close()


def test_list_get_and_purge(nats_server: NatsServer, app: Any, worker: Any) -> None:
    """Real dead letters: listed oldest first and filtered; got by sequence and by job id, in full."""
    started = time.time()
    for i in range(3):
        app.charge.apply(args=(i,), job_id=f"order-{i}")
    app.notify.apply(args=("a@b.c",), job_id="mail-1")
    bad_body = b"\x00\xffnot json{"
    asyncio.run(
        publish_raw(
            nats_server.url,
            [
                ("jsw.dlq.q.default.charge", b'{"args":[1,2,3],"kwargs":{}}', {"Nats-Msg-Id": "bad-args"}),
                ("jsw.dlq.q.default.charge", bad_body, {"Nats-Msg-Id": "bad-body", "Jsw-Task": "charge"}),
            ],
        )
    )
    wait_for_letters(6)

    everything = dlq(lambda d: d.list())
    assert [d.seq for d in everything] == sorted(d.seq for d in everything)
    charged = {"order-0", "order-1", "order-2", "bad-args", "bad-body"}
    assert {d.job_id for d in everything} == {*charged, "mail-1"}
    assert all(d.body is None and d.size > 0 for d in everything)  # a listing reads headers only
    assert {d.job_id for d in dlq(lambda d: d.list(task="charge"))} == charged
    assert [d.job_id for d in dlq(lambda d: d.list(queue="emails"))] == ["mail-1"]
    assert dlq(lambda d: d.list(limit=2)) == everything[:2]
    assert dlq(lambda d: d.list(task="notify", queue="default")) == []
    assert (dlq(lambda d: d.count()), dlq(lambda d: d.count(task="charge"))) == (6, 5)

    seq = next(d.seq for d in everything if d.job_id == "order-1")
    letter = dlq(lambda d: d.get(seq))
    assert dlq(lambda d: d.get(str(seq))) == letter
    assert dlq(lambda d: d.get("order-1")) == letter
    assert letter.payload() == {"args": [1], "kwargs": {}}
    assert letter.size == len(letter.body or b"")
    assert (letter.task, letter.queue, letter.attempts) == ("charge", "default", 1)
    assert letter.subject == "jsw.dlq.q.default.charge.order-1"
    assert (letter.error_type, letter.error) == ("Reject", "order 1 cannot be charged")
    assert letter.traceback is not None and "\n" in letter.traceback
    assert 'raise Reject(f"order {order} cannot be charged")' in letter.traceback
    assert letter.failed_at is not None and started - 1 < letter.failed_at < time.time() + 1
    assert letter.headers["Jsw-Task"] == "charge" and "Content-Type" in letter.headers
    assert not [k for k in letter.headers if k.lower().startswith(("jsw-dlq-", "nats-"))]

    mail = dlq(lambda d: d.get("mail-1"))
    assert mail.error_type == "RuntimeError" and "attempts exhausted: 1 of 1" in mail.reason
    assert mail.traceback is not None and "smtp down for a@b.c" in mail.traceback
    raw = dlq(lambda d: d.get("bad-body"))
    assert raw.body == bad_body and raw.pretty_payload() == repr(bad_body)
    with pytest.raises(SerializationError):
        raw.payload()
    assert "bad arguments" in dlq(lambda d: d.get("bad-args")).reason

    for missing in ("nope", 999, "999"):

        async def get(letters: DeadLetters, ref: str | int = missing) -> DeadLetter:
            return await letters.get(ref)

        with pytest.raises(DeadLetterNotFound):
            dlq(get)

    assert dlq(lambda d: d.purge(task="charge")) == 5
    assert [d.job_id for d in dlq(lambda d: d.list())] == ["mail-1"]
    assert dlq(lambda d: d.purge(queue="emails")) == 1
    assert dlq(lambda d: d.count()) == 0


def test_get_by_job_id_is_the_newest(nats_server: NatsServer, app: Any) -> None:
    """A job dead-lettered twice (two attempts): its job id finds the newer dead letter."""

    async def store_two() -> None:
        await app.app.provision()
        await app.app.aclose()
        items = []
        for attempt, reason in ((1, "first"), (2, "second")):
            msg = dead_letter_message(
                Namespace("dlq"),
                subject="jsw.dlq.q.default.charge",
                body=b'{"args":[7],"kwargs":{}}',
                headers={"Nats-Msg-Id": "twice", "Jsw-Task": "charge"},
                job_id="twice",
                task="charge",
                queue="default",
                attempt=attempt,
                reason=reason,
                error=None,
            )
            items.append((msg.subject, msg.body, dict(msg.headers)))
        await publish_raw(nats_server.url, items)

    asyncio.run(store_two())
    letter = dlq(lambda d: d.get("twice"))
    assert (letter.seq, letter.reason, letter.attempts) == (2, "second", 2)
    assert letter.traceback is None and letter.error_type is None


def test_replay_all_leaves_what_cannot_be_replayed(nats_server: NatsServer, app: Any) -> None:
    """A body the worker had to cut stays a dead letter; those around it are replayed and removed."""
    big = b'{"args":["' + b"x" * 5000 + b'"],"kwargs":{}}'

    async def store() -> None:
        await app.app.provision()
        await app.app.aclose()
        items = []
        for job_id, body in (
            ("a", b'{"args":[1],"kwargs":{}}'),
            ("cut", big),
            ("b", b'{"args":[2],"kwargs":{}}'),
        ):
            msg = dead_letter_message(
                Namespace("dlq"),
                subject="jsw.dlq.q.default.charge",
                body=body,
                headers={"Nats-Msg-Id": job_id, "Jsw-Task": "charge"},
                job_id=job_id,
                task="charge",
                queue="default",
                attempt=1,
                reason="rejected",
                error=None,
                max_payload=2000,  # as if the server allowed no more
            )
            items.append((msg.subject, msg.body, dict(msg.headers)))
        await publish_raw(nats_server.url, items)

    asyncio.run(store())
    assert dlq(lambda d: d.get("cut")).original_size == len(big)
    with pytest.raises(DeadLetterNotReplayable):
        dlq(lambda d: d.replay(["a", "cut"]))  # refused before anything is replayed
    assert dlq(lambda d: d.count()) == 3
    assert [j.id for j in dlq(lambda d: d.replay(all=True))] == ["a", "b"]
    assert [d.job_id for d in dlq(lambda d: d.list())] == ["cut"]
    assert stream_messages(nats_server.url, "JSW_DLQ") == 2


def test_replay_by_ref_task_and_all(
    nats_server: NatsServer,
    app: Any,
    worker: Any,
    broken: Path,
    record: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After the fix, replayed jobs run once each, with their job id and attempt 1, and leave the DLQ."""
    for i in range(3):
        app.charge.apply(args=(i,), job_id=f"order-{i}")
    app.notify.apply(args=("a@b.c",), job_id="mail-1")
    wait_for_letters(4)
    seqs = {d.job_id: d.seq for d in dlq(lambda d: d.list())}
    with pytest.raises(ConfigurationError):
        dlq(lambda d: d.replay())
    with pytest.raises(ConfigurationError):
        dlq(lambda d: d.replay(["order-1"], all=True))
    with pytest.raises(DeadLetterNotFound):
        dlq(lambda d: d.replay(["order-1", "nope"]))  # nothing replayed when one ref is missing
    with pytest.raises(DeadLetterNotFound):
        dlq(lambda d: d.replay(["mail-1"], task="charge"))
    assert dlq(lambda d: d.count()) == 4
    broken.unlink()

    [job] = dlq(lambda d: d.replay(["order-1"]))
    assert isinstance(job, ReplayedJob)
    assert (job.id, job.task, job.queue, job.replayed_from, job.duplicate) == (
        "order-1",
        "charge",
        "default",
        seqs["order-1"],
        False,
    )
    wait_until(lambda: ("order-1", 1) in executions(record), timeout=20, message="order-1 to run again")
    with pytest.raises(DeadLetterNotFound):
        dlq(lambda d: d.get(seqs["order-1"]))

    # A crash between publish and delete leaves the dead letter; its second replay is deduped.
    async def crash_before_delete(self: LimitsStream, seq: int) -> bool:
        return False

    with monkeypatch.context() as patched:
        patched.setattr(LimitsStream, "delete", crash_before_delete)
        [first] = dlq(lambda d: d.replay([seqs["order-0"]]))
    wait_until(lambda: ("order-0", 1) in executions(record), timeout=20, message="order-0 to run")
    [again] = dlq(lambda d: d.replay([str(seqs["order-0"])]))
    assert again.duplicate and again.seq == first.seq
    with pytest.raises(DeadLetterNotFound):
        dlq(lambda d: d.get(seqs["order-0"]))

    assert [j.id for j in dlq(lambda d: d.replay(task="charge"))] == ["order-2"]
    assert [j.id for j in dlq(lambda d: d.replay(all=True))] == ["mail-1"]
    assert dlq(lambda d: d.replay(all=True)) == []
    wait_until(lambda: len(executions(record)) == 4, timeout=20, message="every replayed job to run")
    # Each queue delivered its first attempts (all failed) and one replay per job, all acked:
    # a further delivery, hence a second run, would count here.
    assert wait_consumer_settled(nats_server.url, "JSW_DLQ", "default").delivered == 3 + 3
    assert wait_consumer_settled(nats_server.url, "JSW_DLQ", "emails").delivered == 1 + 1
    assert executions(record) == {(job_id, 1): 1 for job_id in ("order-0", "order-1", "order-2", "mail-1")}
    assert dlq(lambda d: d.count()) == 0
    assert stream_messages(nats_server.url, "JSW_DLQ") == 0


def test_a_replayed_job_that_fails_again_is_dead_lettered_again(app: Any, worker: Any) -> None:
    """Replayed before the fix: the job fails again and must come back as a new dead letter."""
    app.charge.apply(args=(9,), job_id="order-9")
    wait_for_letters(1)
    [job] = dlq(lambda d: d.replay(["order-9"]))
    wait_until(
        lambda: dlq(lambda d: d.count()),
        until=lambda n: n == 1,
        timeout=20,
        message="the job to be dead-lettered again",
    )
    letter = dlq(lambda d: d.get("order-9"))
    assert isinstance(job, ReplayedJob)
    assert letter.headers[REPLAYED_FROM] == str(job.replayed_from)


@pytest.mark.slow
def test_cli(nats_server: NatsServer, app: Any, worker: Any, broken: Path, record: Path) -> None:
    """``jsworker dlq list|show|replay|purge`` end to end: output, --json, exit codes."""
    url = nats_server.url
    for i in range(2):
        app.charge.apply(args=(i,), job_id=f"order-{i}")
    for i in range(2):
        app.notify.apply(args=(f"user{i}@b.c",), job_id=f"mail-{i}")
    wait_for_letters(4)

    table = cli(url, "list", "dlq_app")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split()[:3] == ["SEQ", "FAILED", "AT"] and "REASON" in header
    assert sorted(row.split()[2] for row in rows) == ["mail-0", "mail-1", "order-0", "order-1"]
    listed = [json.loads(line) for line in cli(url, "list", "dlq_app", "--json").stdout.splitlines()]
    assert len(listed) == 4 and {d["task"] for d in listed} == {"charge", "notify"}
    charge = cli(url, "list", "dlq_app", "--task", "charge", "--json", "--limit", "1").stdout.splitlines()
    assert len(charge) == 1 and json.loads(charge[0])["task"] == "charge"
    seqs = {d["job_id"]: d["seq"] for d in listed}

    shown = cli(url, "show", "dlq_app", str(seqs["order-1"]))
    assert shown.returncode == 0, shown.stderr
    assert "job id:    order-1" in shown.stdout and '  "args": [' in shown.stdout
    assert "traceback:" in shown.stdout and "jsworker._errors.Reject: order 1" in shown.stdout
    as_json = json.loads(cli(url, "show", "dlq_app", "mail-1", "--json").stdout)
    assert as_json["payload"] == {"args": ["user1@b.c"], "kwargs": {}}
    assert "RuntimeError: smtp down" in as_json["traceback"]
    missing = cli(url, "show", "dlq_app", "nope")
    assert missing.returncode == 2 and "nope" in one_error_line(missing)
    assert cli(url, "replay", "dlq_app").returncode == 2
    no_module = cli(url, "list", "no_such_module_xyz")
    assert no_module.returncode == 2 and "no_such_module_xyz" in one_error_line(no_module)

    refused = cli(url, "purge", "dlq_app", "--task", "charge")
    assert refused.returncode == 2 and "--yes" in one_error_line(refused)
    purged = cli(url, "purge", "dlq_app", "--task", "charge", "--yes")
    assert purged.returncode == 0 and "purged 2" in purged.stdout, purged.stderr
    assert dlq(lambda d: d.count()) == 2

    broken.unlink()
    replayed = cli(url, "replay", "dlq_app", str(seqs["mail-1"]))
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.splitlines() == [f"{seqs['mail-1']} -> job mail-1 (notify), stream seq 5"]
    twice = cli(url, "replay", "dlq_app", str(seqs["mail-1"]))
    assert twice.returncode == 2 and str(seqs["mail-1"]) in one_error_line(twice)
    rest = cli(url, "replay", "dlq_app", "--all")
    assert rest.returncode == 0 and rest.stdout.startswith(f"{seqs['mail-0']} -> job mail-0 "), rest.stderr
    wait_until(lambda: len(executions(record)) == 2, timeout=20, message="the replayed jobs to run")
    assert executions(record) == {("mail-0", 1): 1, ("mail-1", 1): 1}
    assert cli(url, "list", "dlq_app").stdout.strip() == "no dead letters"


@pytest.fixture
def closed_url() -> Iterator[str]:
    """A loopback URL that refuses connections: the port is bound by us, never listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"nats://127.0.0.1:{sock.getsockname()[1]}"


def test_cli_cannot_connect_exits_3(closed_url: str) -> None:
    """No server at the URL: exit 3 and one line naming it."""
    result = cli(closed_url, "list", "dlq_app", "--url", closed_url, env=REFUSED_QUICKLY)
    assert result.returncode == 3 and closed_url in one_error_line(result)
