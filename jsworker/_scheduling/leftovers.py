"""Leftover schedules: a delayed job's one-shot schedule still stored after its job fired.

The server fires a delayed job in two writes: it stores the fired job, then removes the
schedule (the fired message's ``Nats-Schedule-Next: purge`` does it). A server killed between
the two keeps the schedule after it restarts although its job fired and ran. It does not fire
again, but ``jsworker status`` and ``jsworker_queue_delayed`` would count it as waiting forever.

Every firing a worker takes up is claimed before it runs (:mod:`.claims`), so a claim on a
schedule's ``(job id, due time)`` shows that it fired (or was cancelled). Workers run
:func:`sweep_leftovers` in the background and remove such schedules once they are well past
due. It is not done per fired job: a read of its schedule before or beside each run halved
the rate of fired jobs, for a state only a killed server leaves.
"""

from __future__ import annotations

import random
import time

from .._wire.headers import SCHEDULE
from .._wire.names import Namespace
from ..jetstream.connection import Connection
from ..jetstream.inspect import stream_facts
from ..jetstream.limits_stream import LimitsStream
from .claims import claim_of

#: How long past its due time a schedule must be before a sweep looks at it (milliseconds).
#: The server fires within moments of the due time and removes the schedule at once; only one
#: still there a minute later can be a leftover.
GRACE_MS = 60_000
#: The most schedules one sweep checks (a claim read each): a backlog of overdue schedules
#: that have not been taken up yet must not make one sweep long.
MAX_CANDIDATES = 1000


async def sweep_leftovers(
    conn: Connection,
    namespace: Namespace,
    now_ms: int | None = None,
    grace_ms: int = GRACE_MS,
    *,
    limit: int = MAX_CANDIDATES,
) -> int:
    """Remove the delayed-job schedules of ``namespace`` due ``grace_ms`` or more before
    ``now_ms`` whose firing has been claimed; return how many were removed.

    ``now_ms`` (unix milliseconds) defaults to the server's clock as it answered the listing
    (the server fires on its own clock), or this machine's if the server does not say. A
    schedule past due that nobody claimed is left alone: its fired job may still wait in its
    queue, and an overdue schedule that has not fired is the server's to fire. When more than
    ``limit`` schedules are past due, a random ``limit`` of them are checked, so that ones
    that stay unclaimed cannot hide the others from every later sweep.

    Costs one ``STREAM.INFO`` listing the delayed subjects (as ``jsworker status`` does), then
    per schedule past due one claim read, and per leftover one read and one delete.
    """
    facts = await stream_facts(conn, namespace.schedules_stream, namespace.delayed_filter())
    if not facts.subjects:
        return 0
    if now_ms is None:
        now_ms = int((facts.server_time or time.time()) * 1000)
    cutoff = now_ms - grace_ms
    candidates: list[tuple[str, int, str]] = []
    for subject in facts.subjects:
        parsed = namespace.parse_delayed_subject(subject)
        if parsed is not None and parsed[1] <= cutoff:
            candidates.append((subject, parsed[1], parsed[2]))
    if len(candidates) > limit:
        candidates = random.sample(candidates, limit)
    claims = LimitsStream(conn, namespace.claims_stream)
    schedules = LimitsStream(conn, namespace.schedules_stream)
    removed = 0
    for subject, due, job_id in candidates:
        if claim_of(await claims.last(namespace.claim_subject(job_id, due))) is None:
            continue
        # By sequence, as a cancel removes a schedule: only the message just read goes. A
        # second schedule stored on the same subject (rare) is left to the next sweep.
        found = await schedules.last(subject)
        if found is not None and SCHEDULE in found.headers and await schedules.delete(found.seq):
            removed += 1
    return removed
