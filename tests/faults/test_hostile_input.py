"""Hostile messages published straight to the job subjects, bypassing the producer's checks:
each must end in the dead-letter stream with a reason, and the worker must keep working."""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass
from types import ModuleType

import nats
import pytest

from jsworker.testing import NatsServer

from ..support import wait_until
from .harness import Records, WorkerProc, Workers, dead_letters, summarize, wait_stream_empty

pytestmark = pytest.mark.faults


def subject(task: str, queue: str = "default") -> str:
    return f"jsw.flt.q.{queue}.{task}"


def headers(job_id: str, task: str) -> dict[str, str]:
    return {"Nats-Msg-Id": job_id, "Jsw-Task": task}


def envelope(args: object, kwargs: object = None) -> bytes:
    return json.dumps({"args": args, "kwargs": {} if kwargs is None else kwargs}).encode()


@dataclass
class Raw:
    """One message as published: ``job_id`` None means "no headers", its id is then ``seq-<n>``."""

    name: str
    subject: str
    body: bytes
    job_id: str | None
    task: str = "work"


def hostile(max_payload: int) -> list[Raw]:
    """Every bad message, by name (``job_id`` = ``bad-<name>`` unless it has no headers)."""
    rng = random.Random(5)
    # A body this much under max_payload leaves room for the headers a dead letter adds.
    big = max_payload - 64 * 1024
    items = [
        ("random_bytes", subject("work"), rng.randbytes(300)),
        ("truncated_json", subject("work"), envelope([1, 5.0])[:-7]),
        ("args_is_object", subject("work"), envelope({"n": 1, "ms": 5.0})),
        ("args_is_string", subject("work"), envelope("1, 5.0")),
        ("args_wrong_arity", subject("work"), envelope([1, 5.0, "extra"])),
        ("kwargs_unknown_name", subject("work"), envelope([], {"n": 1, "ms": 5.0, "colour": "red"})),
        ("kwargs_is_list", subject("work"), envelope([], [["n", 1], ["ms", 5.0]])),
        ("arg_wrong_type", subject("typed"), envelope(["seven"])),
        ("huge_args", subject("blob"), envelope(["x" * big, "one argument too many"])),
        ("unknown_task", subject("no_such_task"), envelope([1])),
        ("hostile_task_name", subject("work"), envelope([1, 5.0])),
        ("empty_body", subject("work"), b""),
        ("json_list_body", subject("work"), b"[1, 5.0]"),
        ("json_null_body", subject("work"), b"null"),
        ("deeply_nested_json", subject("work"), b"[" * 100_000 + b"]" * 100_000),
        ("invalid_utf8_json", subject("work"), b'{"args": ["\xff\xfe", 5.0], "kwargs": {}}'),
    ]
    tasks = {"arg_wrong_type": "typed", "huge_args": "blob", "unknown_task": "no_such_task"}
    # A name no task can have, with path and subject syntax in it.
    tasks["hostile_task_name"] = "../*.>\x7f"
    out = [Raw(name, subj, body, f"bad-{name}", tasks.get(name, "work")) for name, subj, body in items]
    # No headers at all (no job id, no task name) and a body nobody can decode.
    out.append(Raw("no_headers_garbage", subject("work"), b"\x00\x01 not a job", None))
    return out


async def _publish_mixed(url: str, app: ModuleType, bad: list[Raw]) -> tuple[dict[str, str], set[str], str]:
    """Publish good jobs (through the producer) between the bad ones (raw); return the bad ones'
    job ids by name, the good ids, and the id of a headerless but well-formed job."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        good: set[str] = set()
        bad_ids: dict[str, str] = {}
        for i, raw in enumerate(bad):
            good.add((await app.work.aapply((i, 1.0))).id)
            hdrs = headers(raw.job_id, raw.task) if raw.job_id is not None else None
            ack = await js.publish(raw.subject, raw.body, headers=hdrs)
            # Without Nats-Msg-Id or Jsw-Job-Id the worker names the job after its stream sequence.
            bad_ids[raw.name] = raw.job_id or f"seq-{ack.seq}"
        # A big but valid job: headers and body just under max_payload.
        body = envelope(["y" * (nc.max_payload - 2048)])
        ack = await js.publish(subject("blob"), body, headers=headers("good-huge", "blob"))
        good.add("good-huge")
        # No headers but a valid body on a task's subject: the worker takes the task from the
        # subject (its documented fallback), so this one runs.
        ack = await js.publish(subject("work"), envelope([-1, 1.0]))
        headerless = f"seq-{ack.seq}"
        for i in range(20):
            good.add((await app.work.aapply((1000 + i, 1.0))).id)
        return bad_ids, good, headerless
    finally:
        await nc.close()
        await app.app.aclose()


def _assert_alive(worker: WorkerProc) -> None:
    assert worker.alive(), f"the worker died ({worker.proc.returncode}):\n{worker.tail()}"


@pytest.mark.timeout(90)
def test_hostile_messages_are_dead_lettered_and_good_jobs_run(
    nats_server: NatsServer, fault_app: ModuleType, workers: Workers, records: Records
) -> None:
    """17 kinds of bad message (random bytes, truncated JSON, args/kwargs of the wrong shape or
    type, a body near max_payload, unknown or hostile task names, no headers, empty body, JSON
    list/null bodies, 100,000-deep nesting, invalid UTF-8) interleaved with good jobs: each bad
    one is dead-lettered once, with a reason and its body byte for byte; every good one runs;
    the worker never dies and exits 0 on SIGTERM."""
    url = nats_server.url
    fault_app.app.servers = [url]
    worker = workers.start(url, "w", "-c", "20")
    worker.wait_started()

    bad = hostile(1024 * 1024)  # the server's default max_payload (checked below)
    bad_ids, good, headerless = asyncio.run(_publish_mixed(url, fault_app, bad))
    good.add(headerless)

    def settled() -> bool:
        _assert_alive(worker)
        return records.done_ids() >= good and set(bad_ids.values()) <= set(dead_letters(url))

    wait_until(settled, timeout=45, interval=0.2, message="good jobs done and bad ones dead-lettered")
    wait_stream_empty(url, 30)
    letters = dead_letters(url)
    summary = summarize(
        "hostile_input",
        set(bad_ids.values()) | good,
        records,
        letters,
        bad=len(bad_ids),
        good=len(good),
        reasons={
            name: letters[job_id].headers.get("Jsw-Dlq-Reason", "")[:70] for name, job_id in bad_ids.items()
        },
    )
    _assert_alive(worker)
    assert summary["lost"] == 0
    assert set(letters) == set(bad_ids.values()), "a good job was dead-lettered, or a bad one twice"
    assert not set(bad_ids.values()) & records.done_ids(), "a bad job ran"
    for raw in bad:
        letter = letters[bad_ids[raw.name]]
        assert letter.headers.get("Jsw-Dlq-Reason"), raw.name
        assert letter.data == raw.body, f"{raw.name}: the dead letter does not keep the body"
    assert worker.terminate() == 0, worker.tail()


@pytest.mark.timeout(60)
def test_bad_job_at_max_payload_is_dead_lettered(
    nats_server: NatsServer, fault_app: ModuleType, workers: Workers, records: Records
) -> None:
    """A bad job (one argument too many) whose headers and body fill max_payload to within a
    few hundred bytes: it must still be dead-lettered (the body truncated or the traceback left
    out if need be), and the worker must survive and keep working."""
    url = nats_server.url
    fault_app.app.servers = [url]
    worker = workers.start(url, "w", "-c", "20")
    worker.wait_started()

    async def publish() -> None:
        nc = await nats.connect(url)
        try:
            hdrs = headers("bad-at-max-payload", "blob")
            room = nc.max_payload - len(envelope(["", "extra"])) - 200  # 200: the headers and some slack
            await nc.jetstream().publish(subject("blob"), envelope(["x" * room, "extra"]), headers=hdrs)
        finally:
            await nc.close()

    asyncio.run(publish())
    crashed = False

    def settled() -> bool:
        nonlocal crashed
        crashed = not worker.alive() or any(e.get("event") == "worker.crashed" for e in worker.log_events())
        return crashed or "bad-at-max-payload" in dead_letters(url)

    wait_until(
        settled, timeout=30, interval=0.2, message="the job to be dead-lettered (or the worker to crash)"
    )
    if crashed:
        log = worker.tail(5)
        worker.kill()  # a crashed worker would spend its grace retrying the dead letter
        raise AssertionError(f"the worker crashed:\n{log}")
    after = fault_app.work.delay(1, 1.0)
    wait_until(lambda: after.id in records.done_ids(), timeout=20, message="a job after the big one")
    wait_stream_empty(url, 10)
    _assert_alive(worker)


@pytest.mark.timeout(60)
def test_task_of_another_queue_on_this_queues_subject_is_dead_lettered(
    nats_server: NatsServer, fault_app: ModuleType, workers: Workers, records: Records
) -> None:
    """A Jsw-Task header naming a task of queue "other" on a subject of queue "default" (once
    with the other task's name in the subject too, once with a default task's): the default
    queue's consumer gets it and must dead-letter it, never run it; a queue's workers may be
    sized or placed for that queue's tasks only."""
    url = nats_server.url
    fault_app.app.servers = [url]
    worker = workers.start(url, "w", "-c", "20")
    worker.wait_started()

    async def publish() -> None:
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            await js.publish(subject("elsewhere"), envelope([1]), headers=headers("bad-q1", "elsewhere"))
            await js.publish(subject("work"), envelope([2]), headers=headers("bad-q2", "elsewhere"))
        finally:
            await nc.close()

    asyncio.run(publish())
    wait_stream_empty(url, 20)
    letters = dead_letters(url)
    summarize("task_of_another_queue", {"bad-q1", "bad-q2"}, records, letters)
    assert not {"bad-q1", "bad-q2"} & records.done_ids(), "a task of queue 'other' ran from queue 'default'"
    assert {"bad-q1", "bad-q2"} <= set(letters)
    _assert_alive(worker)
