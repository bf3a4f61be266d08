"""What ``jsworker doctor`` checks: the server and what it supports, the app's streams and queue
consumers against what the code declares (replicas, duplicate window, ack wait, limits...),
where its jobs sit while its partitions change, its periodic schedules against the code's, the
credential in use against its role, the clock, and (given the servers' monitoring ports)
whether an acknowledged write is on disk.

Each check gives :class:`Finding`\\s: ``ok``, a ``warning`` (works, but look), or a ``problem``
(something the app needs is wrong; the command exits non-zero). Every read is one the operator
role may make; the monitoring endpoints are read over HTTP.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._core.layout import queue_consumer_specs
from .._errors import PermissionDeniedError
from .._lifecycle.bucket import RECORDS_SINCE
from .._scheduling.declare import DELAYED_SINCE
from .._scheduling.markers import mark_unmarked
from .._wire.names import MAX_PARTITIONS, partition_of
from ..jetstream.health import stream_health
from ..jetstream.inspect import consumer_facts, stream_facts
from ..jetstream.topology import consumer_drift, stream_drift
from ._doctor_access import credentials
from ._doctor_schedules import schedules
from ._findings import Finding as Finding
from ._findings import Level
from ._findings import findings_json as findings_json

if TYPE_CHECKING:
    from .._app import App
    from ..jetstream.connection import Connection

#: nats-server's default ``sync_interval``: an acknowledged write may sit in the page cache
#: this long before it is flushed.
DEFAULT_SYNC = 120.0
# Seconds of clock difference from the server past which expiries and ages read wrong.
_SKEW = 1.0
_HTTP_TIMEOUT = 5.0


async def diagnose(app: App, conn: Connection, monitoring: Sequence[str] = ()) -> list[Finding]:
    """Every check's findings for ``app`` over ``conn``; ``monitoring``: the servers' monitoring
    URLs (``http://host:8222``), without which durability is not checked."""
    found = [_server(app, conn)]
    checks = (
        ("streams", _streams),
        ("consumers", _consumers),
        ("partitions", _partitions),
        ("unique", _unmarked),
        ("schedules", schedules),
        ("credentials", credentials),
        ("clock", _clock),
    )
    for name, check in checks:
        try:
            found += await check(app, conn)
        except PermissionDeniedError as exc:
            # Run with a role's credential that may not read this: the rest still says something.
            found.append(Finding("warning", name, f"not checked: this user may not read {exc.subject}"))
    if monitoring:
        found += await asyncio.gather(*(asyncio.to_thread(_durability, url) for url in monitoring))
    else:
        found.append(
            Finding("warning", "durability", "not checked: give the servers' monitoring URLs (--monitoring)")
        )
    return found


def _server(app: App, conn: Connection) -> Finding:
    version = conn.server_version
    text = ".".join(map(str, version))
    needs = [
        what
        for what, on in (("workflows", app.options.workflows), ("fair queues", bool(app.fair_queues)))
        if on and version < DELAYED_SINCE
    ]
    if needs:
        return Finding(
            "problem", "server", f"nats-server {text} has no atomic batches: {', '.join(needs)} need 2.12+"
        )
    has = [
        what
        for what, since in (("delayed jobs", DELAYED_SINCE), ("job records", RECORDS_SINCE))
        if version >= since
    ]
    return Finding("ok", "server", f"nats-server {text}" + (f" ({', '.join(has)})" if has else ""))


async def _streams(app: App, conn: Connection) -> list[Finding]:
    specs = app.stream_specs(conn.server_version)
    healths = await asyncio.gather(*(stream_health(conn, spec.name) for spec in specs))
    found: list[Finding] = []
    for spec, health in zip(specs, healths, strict=True):
        if not health.exists:
            found.append(
                Finding("problem", "streams", f"{spec.name} does not exist: run `jsworker provision`")
            )
        elif (replicas := len(health.replicas) + 1) != spec.replicas:
            found.append(
                Finding(
                    "warning",
                    "streams",
                    f"{spec.name} has {replicas} replica(s), the app asks for {spec.replicas}",
                )
            )
        elif not health.healthy:
            found.append(Finding("warning", "streams", f"{spec.name} has no leader or a follower behind"))
        elif drift := await stream_drift(conn, spec):
            found.append(
                Finding(
                    "warning",
                    "streams",
                    f"{spec.name} differs from the code: {'; '.join(drift)}. `jsworker provision` (or a "
                    "worker's start) brings it in line",
                )
            )
    if not found:
        found.append(Finding("ok", "streams", f"{len(specs)} streams as the app declares them"))
    return found


async def _consumers(app: App, conn: Connection) -> list[Finding]:
    specs = queue_consumer_specs(app, app.queues)
    streams = sorted({spec.stream for spec in specs})
    held = dict(zip(streams, await asyncio.gather(*(consumer_facts(conn, s) for s in streams)), strict=True))
    found: list[Finding] = []
    told: set[str] = set()
    for spec in specs:
        facts = next((c for c in held[spec.stream] if c.name == spec.name), None)
        if facts is None:
            found.append(
                Finding(
                    "warning",
                    "consumers",
                    f"queue {spec.name} has no consumer on {spec.stream} yet: no worker "
                    "has served it (`jsworker provision` makes it)",
                )
            )
        elif set_now := {k[4:]: v for k, v in facts.metadata.items() if k.startswith("jsw_")}:
            # Meant: an operator changed them (Admin.set_queue_limits), and deploys keep them.
            if spec.name not in told:
                told.add(spec.name)  # once a queue, not once a partition
                said = ", ".join(f"{name} {value}" for name, value in sorted(set_now.items()))
                found.append(
                    Finding(
                        "warning",
                        "consumers",
                        f"queue {spec.name}: limits set at run time ({said}) stand in for the "
                        "code's until they are set back to 'declared' (the queue's page, or "
                        "Admin.set_queue_limits)",
                    )
                )
        elif drift := await consumer_drift(conn, spec):
            found.append(
                Finding(
                    "warning",
                    "consumers",
                    f"queue {spec.name} on {spec.stream} differs from the code: {'; '.join(drift)}. "
                    "A worker's start (or `jsworker provision`) brings it in line",
                )
            )
    if not found:
        found.append(Finding("ok", "consumers", f"{len(specs)} queue consumers as the app declares them"))
    return found


async def _partitions(app: App, conn: Connection) -> list[Finding]:
    """Each partitioned queue's jobs per partition, those still where the layout before put
    them while its partitions change, and job streams past the app's that still hold jobs."""
    ns = app.namespace
    found: list[Finding] = []
    for queue in sorted({*app.queues, *app.queue_options}):
        now, *before = app.queue_layouts(queue)
        streams = app.queue_streams(queue)
        if streams == 1:
            continue
        facts = await asyncio.gather(
            *(stream_facts(conn, ns.partition_stream(k), ns.queue_filter(queue, k)) for k in range(streams))
        )
        waiting = [sum((f.subjects or {}).values()) for f in facts]
        misplaced = sum(
            count
            for k, f in enumerate(facts)
            for subject, count in (f.subjects or {}).items()
            if subject.count(".") == 5 and partition_of(subject.rsplit(".", 1)[1], now) != k
        )
        found.append(
            Finding(
                "ok", "partitions", f"queue {queue}: {now} partitions, waiting {'/'.join(map(str, waiting))}"
            )
        )
        if before:
            level: Level = "warning" if misplaced else "ok"
            said = (
                f"{misplaced} job(s) still where the layout of {before[0]} partitions put them: keep "
                f"previous_partitions={before[0]} until none is left"
                if misplaced
                else f"no job left in the layout of {before[0]} partitions: previous_partitions can go"
            )
            found.append(Finding(level, "partitions", f"queue {queue}: {said}"))
    found += await _leftover_streams(app, conn)
    return found


async def _leftover_streams(app: App, conn: Connection) -> list[Finding]:
    """Job streams of partitions the app no longer has (its partitions went down): they are
    made in order, so the first one missing ends the search."""
    ns = app.namespace
    found: list[Finding] = []
    for k in range(app.partition_count, MAX_PARTITIONS):
        facts = await stream_facts(conn, ns.partition_stream(k), ns.partition_subjects(k))
        if not facts.exists:
            break
        held = Counter(
            {(ns.parse_job_subject(s) or ("?", ""))[0]: n for s, n in (facts.subjects or {}).items()}
        )
        if held:
            queues = ", ".join(f"{q} ({n})" for q, n in sorted(held.items()))
            found.append(
                Finding(
                    "problem",
                    "partitions",
                    f"{facts.name} holds jobs no worker pulls: {queues}; set "
                    f"previous_partitions to at least {k + 1} until they drain",
                )
            )
        else:
            found.append(
                Finding("ok", "partitions", f"{facts.name} is empty and no longer used: it may be deleted")
            )
    return found


async def _unmarked(app: App, conn: Connection) -> list[Finding]:
    """Unique delayed jobs scheduled by an earlier version, which a unique enqueue's one check
    does not see until they are marked."""
    if conn.server_version < DELAYED_SINCE or not any(t.unique for t in app.tasks.values()):
        return []
    count = await mark_unmarked(app, conn, dry_run=True)
    if not count:
        return [Finding("ok", "unique", "every scheduled unique job holds its key")]
    return [
        Finding(
            "problem",
            "unique",
            f"{count} unique delayed job(s) scheduled by an earlier version hold their key where a "
            "unique enqueue does not look: run `jsworker schedules mark-unique MODULE` once the "
            "workers are upgraded",
        )
    ]


async def _clock(app: App, conn: Connection) -> list[Finding]:
    asked = time.time()
    facts = await stream_facts(conn, app.namespace.stream, app.namespace.later_filter())
    if facts.server_time is None:
        return []
    skew = facts.server_time - (asked + time.time()) / 2
    if abs(skew) > _SKEW:
        return [
            Finding(
                "warning",
                "clock",
                f"this machine's clock is {skew:+.1f}s off the server's: expiries read wrong",
            )
        ]
    return [Finding("ok", "clock", f"within {_SKEW:g}s of the server's")]


def _durability(url: str) -> Finding:
    """Whether the server at monitoring ``url`` flushes a write to disk before acknowledging it."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/varz", timeout=_HTTP_TIMEOUT) as answer:
            varz: dict[str, Any] = json.load(answer)
    except (OSError, ValueError) as exc:
        return Finding("warning", "durability", f"cannot read {url}/varz: {exc}")
    config = (varz.get("jetstream") or {}).get("config") or {}
    name = varz.get("server_name") or url
    if config.get("sync_always"):
        return Finding(
            "ok", "durability", f"{name}: every write is on disk before it is acknowledged (sync always)"
        )
    interval = float(config.get("sync_interval") or DEFAULT_SYNC * 1e9) / 1e9
    clustered = bool((varz.get("cluster") or {}).get("name"))
    level: Level = "warning" if clustered and interval >= DEFAULT_SYNC else "ok"
    return Finding(
        level,
        "durability",
        f"{name}: writes reach disk every {interval:g}s: an enqueue acknowledged within that time is lost "
        "if every replica loses power at once"
        + (" (set sync_interval: always, see deploy/nats)" if level != "ok" else ""),
    )
