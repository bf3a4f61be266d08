"""A worker process's entry in the app's worker registry (:mod:`jsworker._registry.entries`).

The announcer writes the entry once the worker has started, rewrites it every
:data:`~jsworker._registry.entries.REFRESH_INTERVAL` seconds, and writes a delete marker over it
when the worker stops cleanly. It reads the worker's counters only when it writes, so a job
costs nothing more for it.

Nothing here may stop a worker: the registry is for people watching the fleet. A write that
fails (a server restarting, a user without the registry's permissions) is logged once and
tried again at the next refresh, the bucket made again first in case it was lost; meanwhile
the entry, no longer refreshed, expires. On a server too old for the bucket the announcer
does nothing.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from .._observability.logging import get_logger
from .._registry.entries import REFRESH_INTERVAL, REGISTRY_SINCE, REMOVED, WorkerEntry, workers_bucket_spec
from .._version import __version__
from ..jetstream.connection import Connection
from ..jetstream.stored import write
from ..jetstream.topology import ensure_stream
from .observe import warn_replicas_differ
from .outcomes import OutcomeKind

if TYPE_CHECKING:
    from .._app import App

log = get_logger("jsworker.worker")

_OUTCOMES = tuple(kind.value for kind in OutcomeKind)
# A stopping worker waits this long at most for its delete marker to be stored; without an
# answer the entry expires instead.
_REMOVE_TIMEOUT = 2.0
_NOT_A_TOKEN = re.compile(r"[^A-Za-z0-9_-]+")


class WorkerConcurrency(Protocol):
    """The part of a worker's settings the registry shows."""

    @property
    def concurrency(self) -> int:
        """Jobs the worker runs at once."""
        ...


class RegisteredWorker(Protocol):
    """What the announcer reads of a worker, at each write only."""

    @property
    def queues(self) -> Sequence[str]:
        """The queues it pulls from."""
        ...

    @property
    def settings(self) -> WorkerConcurrency:
        """Its settings (``concurrency``)."""
        ...

    @property
    def in_flight(self) -> int:
        """Jobs running right now."""
        ...

    @property
    def counts(self) -> Mapping[str, int]:
        """Its totals: settled jobs under their outcome's name, among other counts."""
        ...

    @property
    def quiet_since(self) -> float | None:
        """Since when it takes no new job (asked to be quiet), None while it does."""
        ...


def new_worker_id(host: str, pid: int) -> str:
    """``<host>-<pid>-<6 hex digits>``: a subject token (the host's dots and other characters
    become ``-``) unique per process start, also when a pid is reused on the same host."""
    name = _NOT_A_TOKEN.sub("-", host).strip("-")[:40] or "host"
    return f"{name}-{pid}-{secrets.token_hex(3)}"


class WorkerAnnouncer:
    """Keeps the registry entry of one worker process: :meth:`start` once the worker has
    connected and made its streams, :meth:`run` as one of its services (until cancelled), and
    :meth:`remove` when it stops cleanly. None of them raises."""

    def __init__(
        self, app: App, conn: Connection, worker: RegisteredWorker, *, interval: float = REFRESH_INTERVAL
    ) -> None:
        self.app = app
        self.conn = conn
        self.worker = worker
        self.interval = interval
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.id = new_worker_id(self.host, self.pid)
        self.started_at = time.time()
        self._subject = app.namespace.worker_subject(self.id)
        self._enabled = conn.server_version >= REGISTRY_SINCE
        self._bucket_ready = False
        self._failing = False
        self._replicas_reported = False
        self._removed = False
        self._soon: asyncio.Task[None] | None = None

    def entry(self) -> WorkerEntry:
        """The worker's entry as of now."""
        counts = self.worker.counts
        outcomes = {name: counts[name] for name in _OUTCOMES if counts.get(name)}
        return WorkerEntry(
            id=self.id,
            host=self.host,
            pid=self.pid,
            version=__version__,
            queues=tuple(self.worker.queues),
            concurrency=self.worker.settings.concurrency,
            running=self.worker.in_flight,
            done=sum(outcomes.values()),
            started_at=self.started_at,
            seen_at=time.time(),
            outcomes=outcomes,
            quiet_since=self.worker.quiet_since,
        )

    async def start(self) -> None:
        """Write the first entry (making the bucket if needed)."""
        if not self._enabled:
            version = ".".join(map(str, self.conn.server_version))
            log.info("worker.registry_unavailable", server=version, needs=".".join(map(str, REGISTRY_SINCE)))
            return
        await self._refresh()

    async def run(self) -> None:
        """Rewrite the entry every ``interval`` seconds until cancelled."""
        if not self._enabled:
            return
        due = time.monotonic() + self.interval
        while True:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            # On a steady cadence, not interval + the time a write took; a write that took
            # longer than an interval is followed by the next one at once.
            due = max(due + self.interval, time.monotonic())
            await self._refresh()

    def refresh_soon(self) -> None:
        """Rewrite the entry now rather than at the next interval (it says something new)."""
        if self._enabled and not self._removed:
            self._soon = asyncio.get_running_loop().create_task(self._refresh())

    async def remove(self) -> None:
        """Take the worker out of the registry at once: a delete marker over its entry. No
        entry is written after this."""
        self._removed = True
        if not self._enabled:
            return
        try:
            await write(self.conn, self._subject, b"", REMOVED, timeout=_REMOVE_TIMEOUT)
        except Exception as exc:  # the entry expires by itself; a stop must not fail for it
            log.debug("worker.registry_remove_failed", worker_id=self.id, error=str(exc))

    async def _refresh(self) -> None:
        if self._removed:
            return
        try:
            if not self._bucket_ready:
                await self._make_bucket()
            await write(self.conn, self._subject, self.entry().encode(), {}, timeout=self.interval)
        except Exception as exc:  # whatever went wrong, the worker goes on working
            self._bucket_ready = False
            if self._failing:
                log.debug("worker.registry_failed", worker_id=self.id, error=str(exc))
            else:
                log.warning("worker.registry_failed", worker_id=self.id, error=str(exc))
            self._failing = True
        else:
            if self._failing:
                log.info("worker.registry_restored", worker_id=self.id)
            self._failing = False

    async def _make_bucket(self) -> None:
        differ = await ensure_stream(
            self.conn, workers_bucket_spec(self.app.namespace, self.app.options.replicas)
        )
        self._bucket_ready = True
        if differ is not None and not self._replicas_reported:
            self._replicas_reported = True
            warn_replicas_differ(differ)
