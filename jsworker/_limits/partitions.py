"""Limits per partition (a tenant, a customer, an API key a job counts against), across every
worker: ``max_running_per_partition`` and ``rate_limit_per_partition``.

**Concurrency** is a set of leases on the server: partition ``p`` of task ``t`` with at most
``n`` jobs at once has ``n`` lease subjects, ``jsw.<app>.lease.<t>.<p>.<0..n-1>``, in the app's
leases stream, each holding at most one message. A job takes a lease by writing over a free
one (an empty subject, or one whose last message says it was given back: compare-and-set on
its sequence), with a time to live; its worker renews it while the job runs and writes a
"given back" message over it when the job settles (a publish, not an API request). A worker
that dies takes its leases with it once their time is up (:data:`LEASE_TTL`), so the
partition goes on within that time.

**Rate** is a rate limit (:mod:`.rates`) of its own for each partition.

A job that must wait for its partition waits in its worker slot: the worker only learns the
partition from the job's arguments. Order within a partition is not kept: when a lease comes
free, whichever waiting job tries first takes it.
"""

from __future__ import annotations

import asyncio
import random
import secrets
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._errors import JsworkerError
from .._observability.logging import get_logger
from .._wire.headers import MSG_TTL
from ..jetstream.limits_stream import LimitsStream
from ..jetstream.stored import SubjectMoved, write
from .rates import RateLimiter
from .spec import Rate, partition_token

if TYPE_CHECKING:
    from .._wire.names import Namespace
    from ..jetstream.connection import Connection

log = get_logger("jsworker.flow")

# Rate limiters kept for the partitions seen last: one is a few small objects.
_KEPT_RATES = 10_000
# A lease's message says whether it is held or was given back; both expire.
_STATE = "Jsw-Lease"
_FREE = "free"
# Who wrote a holding: a token of each take, so that a holder whose renewal was stored with no
# answer (a slow or electing server) knows its own message when the next renewal finds it.
_HOLDER = "Jsw-Holder"
#: Seconds a lease outlives its worker (partition and fair-queue leases); its holder renews it
#: every third of it.
LEASE_TTL = 15
_GIVEN_BACK = {MSG_TTL: str(LEASE_TTL), _STATE: _FREE}
# A job waiting for a lease looks again after this long, doubling up to a second.
_FIRST_LOOK, _LONGEST_LOOK = 0.02, 1.0


@dataclass(slots=True, eq=False)
class Lease:
    """One held lease: its subject, the sequence of the message that holds it, the headers
    each of its messages carries and its stream (compared and hashed by identity: each is one
    holding)."""

    subject: str
    seq: int
    held: dict[str, str]
    stream: str


def _holding() -> dict[str, str]:
    """The headers of a new holding's messages: its time to live and its own token."""
    return {MSG_TTL: str(LEASE_TTL), _HOLDER: secrets.token_hex(8)}


class Partitions:
    """The per-partition limits of one worker's tasks."""

    def __init__(self, conn: Connection, namespace: Namespace, held: Callable[[str], None]) -> None:
        self.conn = conn
        self.namespace = namespace
        self._stream = LimitsStream(conn, namespace.leases_stream)
        self._held = held
        self._leases: set[Lease] = set()
        self._rates: OrderedDict[tuple[str, str], RateLimiter] = OrderedDict()

    async def lease(self, task: str, key: str, size: int) -> Lease:
        """Wait for one of the ``size`` leases of ``key``'s partition of ``task``, and hold it."""
        pause, waited = _FIRST_LOOK, False
        while True:
            lease = await self.try_lease(task, key, size)
            if lease is not None:
                return lease
            if not waited:
                waited = True
                self._held(task)
            await asyncio.sleep(pause * (0.5 + random.random()))
            pause = min(_LONGEST_LOOK, pause * 2)

    async def try_lease(self, task: str, key: str, size: int) -> Lease | None:
        """One of the ``size`` leases of ``key``'s partition of ``task`` if one is free now
        (then held), else None."""
        base = f"jsw.{self.namespace.app}.lease.{task}.{partition_token(key)}."
        # From a random slot: workers waiting together do not all try slot 0 first.
        start = random.randrange(size)
        for i in range(size):
            try:
                lease = await take_lease(self._stream, f"{base}{(start + i) % size}")
            except JsworkerError as exc:
                # The leases' stream not answering (electing its leader): the job waits for
                # a lease as for a busy partition, and the task's attempt is not spent.
                log.warning("partition.lease_unreadable", task=task, error=str(exc))
                return None
            if lease is not None:
                self._leases.add(lease)
                return lease
        return None

    def held(self, task: str) -> None:
        """Count one job of ``task`` that found its partition full (a metric)."""
        self._held(task)

    async def release(self, lease: Lease) -> None:
        """Give ``lease`` back (see :func:`release_lease`)."""
        self._leases.discard(lease)
        await release_lease(self.conn, lease)

    async def renew_forever(self) -> None:
        """Renew every held lease every third of its time to live, for as long as it is held."""
        while True:
            await asyncio.sleep(LEASE_TTL / 3)
            for lease in list(self._leases):
                if not await renew_lease(self.conn, lease):
                    # Two jobs of the partition may now run at once. Said, not hidden.
                    self._leases.discard(lease)

    def rate(self, task: str, key: str, rate: Rate, held: Callable[[], None]) -> RateLimiter:
        """The rate limiter of ``key``'s partition of ``task``."""
        scope = f"p-{task}-{partition_token(key)}"
        found = self._rates.get((task, key))
        if found is None:
            found = self._rates[(task, key)] = RateLimiter(self.conn, self.namespace, scope, rate, held)
            while len(self._rates) > _KEPT_RATES:
                self._rates.popitem(last=False)
        else:
            self._rates.move_to_end((task, key))
        return found


async def take_lease(stream: LimitsStream, subject: str) -> Lease | None:
    """The lease on ``subject`` (in the leases ``stream``) if it is free (never used, expired,
    given back, or standing on a message that is no holding), else None."""
    expect, held = 0, _holding()
    for _ in range(2):
        try:
            stored = await write(stream.conn, subject, b"", held, expect_last=expect)
            return Lease(subject, stored.seq, held, stream.stream)
        except SubjectMoved:
            pass
        # Used before: free when its last message says it was given back.
        found = await stream.last_direct(subject)
        if found is None:
            continue  # expired meanwhile: empty again
        # A holding carries its time to live: a message without one was not written by a
        # holder (it could stand there until the stream's max age) and holds nothing.
        if found.headers.get(_STATE) != _FREE and MSG_TTL in found.headers:
            return None
        expect = found.seq
    return None


async def renew_lease(conn: Connection, lease: Lease) -> bool:
    """Renew ``lease`` for another :data:`LEASE_TTL`; False when it was lost (it expired while
    the server could not be reached, and was taken). A renewal that fails otherwise is logged
    and True: the lease may still be held, the next renewal tells."""
    try:
        if await _write_over(conn, lease, lease.held):
            return True
    except JsworkerError as exc:
        log.warning("partition.renew_failed", lease=lease.subject, error=str(exc))
        return True
    log.warning("partition.lease_lost", lease=lease.subject)
    return False


async def _write_over(conn: Connection, lease: Lease, headers: dict[str, str]) -> bool:
    """Write a message with ``headers`` over ``lease``'s own (compare-and-set); False when the
    last message is another's. A renewal of this lease stored without an answer (a slow or
    electing server) is its own: found by its token, written over in turn."""
    for _ in range(2):
        try:
            stored = await write(conn, lease.subject, b"", headers, expect_last=lease.seq)
            lease.seq = stored.seq
            return True
        except SubjectMoved:
            last = await _last_holding(conn, lease)
            if last is None:
                return False
            lease.seq = last
    return False


async def _last_holding(conn: Connection, lease: Lease) -> int | None:
    """The sequence of the last message on ``lease``'s subject when it is a holding of this
    lease (a renewal of its own stored without an answer), else None. One that cannot be read
    counts as none: the lease is given up, as before the read."""
    try:
        found = await LimitsStream(conn, lease.stream).last_direct(lease.subject)
    except JsworkerError:
        return None
    if found is None or found.seq == lease.seq or found.headers.get(_HOLDER) != lease.held[_HOLDER]:
        return None
    return found.seq


async def release_lease(conn: Connection, lease: Lease) -> None:
    """Give ``lease`` back: a message saying it is free, written only over this lease's own (a
    publish, not a request to the JetStream API, which answers one at a time)."""
    try:
        # False: expired and taken by another holder already, not ours to free.
        await _write_over(conn, lease, _GIVEN_BACK)
    except JsworkerError as exc:
        # It expires on its own within LEASE_TTL.
        log.warning("partition.release_failed", lease=lease.subject, error=str(exc))
