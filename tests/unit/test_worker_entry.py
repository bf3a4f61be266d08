"""The worker registry's entry format and worker ids (no server: the registry on a real one is
tests/integration/test_workers_registry.py)."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from jsworker._registry.entries import WorkerEntry, workers_bucket_spec
from jsworker._runtime.announcer import new_worker_id
from jsworker._wire.names import Namespace

ENTRY = WorkerEntry(
    id="web-1-4211-9f3a1c",
    host="web-1.example.com",
    pid=4211,
    version="0.1.0",
    queues=("default", "emails"),
    concurrency=100,
    running=3,
    done=1520,
    started_at=1764000000.125,
    seen_at=1764000095.5,
    outcomes={"succeeded": 1500, "failed": 20},
)


def test_an_entry_is_the_documented_json_and_reads_back() -> None:
    stored = json.loads(ENTRY.encode())
    assert stored == {
        "id": "web-1-4211-9f3a1c",
        "host": "web-1.example.com",
        "pid": 4211,
        "version": "0.1.0",
        "queues": ["default", "emails"],
        "concurrency": 100,
        "running": 3,
        "done": 1520,
        "started_at": 1764000000.125,
        "seen_at": 1764000095.5,
        "outcomes": {"succeeded": 1500, "failed": 20},
        "quiet_since": None,
    }
    assert WorkerEntry.decode(ENTRY.encode()) == ENTRY
    quiet = dataclasses.replace(ENTRY, quiet_since=1764000090.0)
    assert WorkerEntry.decode(quiet.encode()) == quiet


def test_fields_a_reader_does_not_know_are_ignored_and_outcomes_may_be_missing() -> None:
    raw = json.loads(ENTRY.encode())
    raw["added_later"] = {"anything": 1}
    del raw["outcomes"]
    del raw["quiet_since"]  # an earlier version's entry
    entry = WorkerEntry.decode(json.dumps(raw).encode())
    assert entry.outcomes == {} and entry.quiet_since is None
    assert (entry.id, entry.queues, entry.done) == (ENTRY.id, ENTRY.queues, ENTRY.done)


@pytest.mark.parametrize(
    "change",
    [
        {"pid": "4211"},
        {"pid": True},
        {"queues": "default"},
        {"queues": ["default", 7]},
        {"running": None},
        {"seen_at": "now"},
        {"outcomes": {"succeeded": "many"}},
    ],
)
def test_an_entry_with_a_wrong_field_is_refused(change: dict[str, object]) -> None:
    raw = {**json.loads(ENTRY.encode()), **change}
    with pytest.raises(ValueError, match="not a worker entry"):
        WorkerEntry.decode(json.dumps(raw).encode())


@pytest.mark.parametrize("data", [b"", b"not json", b"[]", b'{"id": "x"}'])
def test_what_is_not_an_entry_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError, match="not a worker entry"):
        WorkerEntry.decode(data)


def test_worker_ids_are_subject_tokens_unique_per_start() -> None:
    token = re.compile(r"[A-Za-z0-9_-]+")
    for host in ("web-1", "ip-10-0-0-1.ec2.internal", "höst name*>", "...", "x" * 300):
        worker_id = new_worker_id(host, 4211)
        assert token.fullmatch(worker_id), worker_id
        assert worker_id.endswith("-4211-" + worker_id.rsplit("-", 1)[1])
        assert len(worker_id) <= 60
    assert new_worker_id("ip-10-0-0-1.ec2.internal", 7).startswith("ip-10-0-0-1-ec2-internal-7-")
    assert len({new_worker_id("web-1", 4211) for _ in range(20)}) > 1  # a reused pid gets a new id


def test_the_bucket_keeps_one_entry_a_worker_for_the_ttl() -> None:
    spec = workers_bucket_spec(Namespace("Shop"), replicas=3)
    assert (spec.name, spec.subjects) == ("KV_jsw_shop_workers", ("$KV.jsw_shop_workers.>",))
    assert (spec.max_age, spec.max_msgs_per_subject, spec.replicas, spec.kv) == (12.0, 1, 3, True)
    assert spec.duplicate_window <= spec.max_age
