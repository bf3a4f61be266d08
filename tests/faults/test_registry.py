"""A worker killed with -9 cannot remove its registry entry: the entry expires, within the
bucket's TTL of the worker's last refresh, while a live worker's entry stays and is refreshed.

The registry is read with nats-py's own key-value client: the bucket must be one that any
key-value reader understands, and the reads do not depend on the code under test.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import nats.js.errors
import pytest

from jsworker._registry.entries import ENTRY_TTL, REFRESH_INTERVAL
from jsworker.testing import NatsServer

from ..support import UNSETTLED, connected, wait_until
from .harness import APP, Workers

pytestmark = pytest.mark.faults

BUCKET = f"jsw_{APP}_workers"


async def _entries(url: str) -> dict[int, dict[str, Any]]:
    # The keys from the stream's own per-subject counts: nats-py's kv.keys() can end its
    # listing before the keys already on their way arrive (it reads "nothing pending" from
    # the consumer while they are in the client's buffer), and a missing key here would pass
    # for an expired entry.
    async with connected(url) as nc:
        js = nc.jetstream()
        try:
            kv = await js.key_value(BUCKET)
            info = await js.stream_info(f"KV_{BUCKET}", subjects_filter=f"$KV.{BUCKET}.>")
        except nats.js.errors.BucketNotFoundError:
            return {}
        found = {}
        for subject in info.state.subjects or {}:
            try:
                entry = json.loads((await kv.get(subject.split(".", 2)[2])).value or b"{}")
            except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):  # expired, removed
                continue
            found[entry["pid"]] = entry
        return found


def entries(url: str) -> dict[int, dict[str, Any]]:
    """Every worker entry in the registry, by the worker's pid."""
    return asyncio.run(_entries(url))


@pytest.mark.timeout(90)
def test_a_killed_worker_leaves_the_registry_within_the_ttl(
    nats_server: NatsServer, workers: Workers
) -> None:
    """Two workers; A, killed with -9 right after it refreshed its entry, is listed until the
    entry's TTL runs out and not after; B stays listed, its entry refreshed."""
    url = nats_server.url
    a = workers.start(url, "a", "-Q", "default")
    b = workers.start(url, "b", "-Q", "default")
    a.wait_started()
    b.wait_started()
    first = wait_until(
        lambda: entries(url),
        until=lambda found: {a.pid, b.pid} <= set(found),
        timeout=30,
        message="both workers in the registry",
        ignore=UNSETTLED,
    )
    # Killed just after a refresh of its own (by the running process, not its first write):
    # the longest an entry can outlive its worker.
    refreshed = wait_until(
        lambda: entries(url),
        until=lambda found: a.pid in found and found[a.pid]["seen_at"] > first[a.pid]["seen_at"],
        timeout=REFRESH_INTERVAL + 5,
        message=f"worker {a.pid} to refresh its entry",
        ignore=UNSETTLED,
    )

    a.kill()
    killed_at = time.monotonic()
    since_refresh = time.time() - refreshed[a.pid]["seen_at"]
    # Nothing removed it: the entry is still there, and only its TTL takes it away.
    assert a.pid in entries(url)
    wait_until(
        lambda: entries(url),
        until=lambda found: a.pid not in found,
        # ENTRY_TTL from the refresh just before the kill, with slack for the server's expiry
        # timer (a fraction of a second) and for these reads.
        timeout=ENTRY_TTL + 5,
        interval=0.25,
        message=f"the entry of worker {a.pid}, killed, to expire",
        ignore=UNSETTLED,
    )
    gone_after = time.monotonic() - killed_at
    # Not before the TTL of the last refresh: nothing but the expiry took it away ...
    assert gone_after >= ENTRY_TTL - since_refresh - 1, (gone_after, since_refresh)
    # ... and within 15 s of the kill, the longest a dead worker may stay listed.
    assert gone_after <= 15, gone_after

    # The live worker kept refreshing its entry all along.
    assert b.alive(), b.tail()
    now = entries(url)
    assert set(now) == {b.pid}
    assert now[b.pid]["id"] == first[b.pid]["id"]
    assert now[b.pid]["seen_at"] > first[b.pid]["seen_at"] + REFRESH_INTERVAL - 0.5
    summary = {
        "test": "killed_worker_leaves_registry",
        "refreshed_before_kill_s": round(since_refresh, 2),
        "gone_after_kill_s": round(gone_after, 2),
    }
    print(json.dumps(summary))  # noqa: T201 - the figure this suite reports (pytest -s)
