"""The worker registry: which worker processes of an app are alive, readable from anywhere.

Every worker process keeps one entry in the app's workers bucket, a key-value bucket (stream
``KV_jsw_<app>_workers``, keys ``$KV.jsw_<app>_workers.<worker id>``, so
``nats kv ls jsw_<app>_workers`` lists them too). The bucket keeps one message a key for
:data:`ENTRY_TTL` seconds (the stream's ``max_age``, the bucket's TTL in key-value terms). A
worker rewrites its entry every :data:`REFRESH_INTERVAL` seconds while it lives, so the entry of
a worker killed with -9 (or cut off from the servers) is gone at most ``ENTRY_TTL`` seconds
after its last refresh, and one that stops cleanly writes a delete marker (``KV-Operation:
DEL``, as ``nats kv del`` does) over it at once. The worker's side is
:mod:`jsworker._runtime.announcer`.

An entry is one JSON object::

    {"id": "web-1-4211-9f3a1c", "host": "web-1", "pid": 4211, "version": "0.1.0",
     "queues": ["default", "emails"], "concurrency": 100, "running": 3, "done": 1520,
     "outcomes": {"succeeded": 1500, "failed": 20}, "started_at": 1764000000.123,
     "seen_at": 1764000095.456}

- ``id``: unique per process start, ``<host>-<pid>-<random hex>`` made a subject token;
- ``host``, ``pid``: where the process runs (the host name as the machine gives it);
- ``version``: the jsworker release it runs;
- ``queues``: the queues it pulls from; ``concurrency``: its ``--concurrency``;
- ``running``: jobs running when the entry was written;
- ``done``: jobs it settled since it started, whatever their outcome (a retried job counts
  each attempt), and ``outcomes`` the same by outcome (``succeeded``, ``failed``, ``retry``,
  ``timed_out``, ...; outcomes with none left out);
- ``started_at``, ``seen_at``: unix seconds on the worker's clock, when it started and when it
  wrote this entry.

Readers ignore fields they do not know (a newer worker may add some) and skip entries they
cannot read, so workers of different releases share a bucket.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import aclosing
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from .._wire.names import Namespace, Role
from ..jetstream.connection import Connection, ConnectOptions
from ..jetstream.limits_stream import LimitsStream
from ..jetstream.topology import StreamSpec


class RegistryApp(Protocol):
    """What the registry reads of an app: its names, and how an operator connects."""

    @property
    def namespace(self) -> Namespace: ...

    def connect_options(self, role: Role, purpose: str | None = None) -> ConnectOptions: ...


ENTRY_TTL = 12.0
"""Seconds an entry lives after it was last written."""
REFRESH_INTERVAL = 4.0
"""Seconds between a live worker's writes of its entry: a third of the TTL, so two writes in a
row may fail (a reconnect, a leader election) before a live worker drops out of the list."""
REGISTRY_SINCE = (2, 11, 0)
"""The bucket is made like the app's jobs bucket (a key-value stream that allows per-message
TTLs), which servers before 2.11 do not know."""

KV_OPERATION = "KV-Operation"
REMOVED = {KV_OPERATION: "DEL"}
"""Headers of the marker a worker that stops cleanly writes over its entry."""


def workers_bucket_spec(namespace: Namespace, replicas: int) -> StreamSpec:
    """The bucket's stream: the last entry of each worker, each kept :data:`ENTRY_TTL` seconds.

    File storage, although entries are short-lived: a single server forgets a memory stream,
    definition included, when it restarts."""
    return StreamSpec(
        name=namespace.workers_stream,
        subjects=(namespace.worker_subject(),),
        work_queue=False,
        replicas=replicas,
        # Entries carry no Nats-Msg-Id; the window only has to fit within max_age.
        duplicate_window=1.0,
        max_age=ENTRY_TTL,
        max_msgs_per_subject=1,
        kv=True,
    )


@dataclass(frozen=True, slots=True)
class WorkerEntry:
    """One live worker process, as its last entry in the registry says (see the module)."""

    id: str
    host: str
    pid: int
    version: str
    queues: tuple[str, ...]
    concurrency: int
    running: int
    done: int
    started_at: float
    seen_at: float
    outcomes: Mapping[str, int] = field(default_factory=dict)
    #: Since when (unix seconds) it takes no new job, asked to be quiet; None while it does.
    quiet_since: float | None = None

    def encode(self) -> bytes:
        """The entry as stored: compact JSON."""
        return json.dumps(self.as_dict(), separators=(",", ":")).encode()

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with the fields of the stored entry."""
        fields = asdict(self)
        fields["queues"] = list(self.queues)
        fields["outcomes"] = dict(self.outcomes)
        return fields

    @classmethod
    def decode(cls, data: bytes) -> WorkerEntry:
        """The entry stored as ``data``; ValueError when it is not one."""
        try:
            raw = json.loads(data)
            entry = cls(
                id=_typed(raw["id"], str),
                host=_typed(raw["host"], str),
                pid=_typed(raw["pid"], int),
                version=_typed(raw["version"], str),
                queues=tuple(_typed(q, str) for q in _typed(raw["queues"], list)),
                concurrency=_typed(raw["concurrency"], int),
                running=_typed(raw["running"], int),
                done=_typed(raw["done"], int),
                started_at=float(_typed(raw["started_at"], int | float)),
                seen_at=float(_typed(raw["seen_at"], int | float)),
                outcomes={
                    _typed(k, str): _typed(v, int) for k, v in _typed(raw.get("outcomes", {}), dict).items()
                },
                # Entries of earlier versions have none.
                quiet_since=None
                if raw.get("quiet_since") is None
                else float(_typed(raw["quiet_since"], int | float)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a worker entry: {data[:200]!r}") from exc
        return entry


def _typed(value: Any, kind: Any) -> Any:
    # bool is an int to isinstance, and no count or pid is ever true or false.
    if not isinstance(value, kind) or isinstance(value, bool):
        raise TypeError(f"{value!r} is not {kind}")
    return value


async def live_workers(app: RegistryApp, conn: Connection | None = None) -> list[WorkerEntry]:
    """Every live worker process of ``app``, sorted by host, pid and id: what
    ``jsworker workers`` lists, as :class:`WorkerEntry` values (both importable from
    ``jsworker``)::

        for worker in await jsworker.live_workers(app):
            print(worker.host, worker.pid, worker.queues, worker.running)

    Reads the last message of every key once (a throwaway consumer; nothing is polled), and
    leaves out delete markers and entries that cannot be read; expired entries are gone from
    the server already. A bucket no worker has made yet reads as empty.
    :class:`~jsworker.ServerVersionError` on servers before 2.11. Without ``conn`` a
    connection is opened for the call and closed after it.
    """
    if conn is None:
        own = await Connection.open(app.connect_options("operator", "workers"))
        try:
            return await live_workers(app, own)
        finally:
            await own.close()
    conn.require_version("the worker registry", REGISTRY_SINCE)
    ns = app.namespace
    found: dict[str, tuple[int, WorkerEntry]] = {}
    # The bucket keeps one message a key, so reading all of them reads the last of each; a
    # worker that refreshes during the read may show twice, and its newer entry wins.
    async with aclosing(
        LimitsStream(conn, ns.workers_stream).scan(ns.worker_subject(), bodies=True)
    ) as stored:
        async for msg in stored:
            if msg.headers.get(KV_OPERATION) or not msg.body:
                continue
            try:
                entry = WorkerEntry.decode(msg.body)
            except ValueError:
                continue
            if msg.subject not in found or found[msg.subject][0] < msg.seq:
                found[msg.subject] = (msg.seq, entry)
    return sorted((entry for _, entry in found.values()), key=lambda e: (e.host, e.pid, e.id))
