"""How a stream's servers are doing: the server version, the stream's leader and replicas.

One ``STREAM.INFO`` without subject details: the answer is small whatever the stream holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._errors import StreamRequestError
from .api import ApiError, api_subject, failures_as, request_json
from .connection import Connection


@dataclass(frozen=True, slots=True)
class Replica:
    """One follower of a clustered stream, as its leader sees it."""

    name: str
    current: bool  # caught up with the leader
    offline: bool
    lag: int  # operations behind the leader
    active: float  # seconds since the leader last heard from it


@dataclass(frozen=True, slots=True)
class StreamHealth:
    """The server this connection talks to and one stream as its cluster reports it.

    ``exists`` is False when the stream is not there (the app never ran, or it was deleted);
    ``cluster`` is None on a server that is not in a cluster. ``healthy``: the stream has a
    leader and every follower is online and caught up.
    """

    server_version: str
    stream: str
    exists: bool
    messages: int = 0
    bytes: int = 0
    cluster: str | None = None
    leader: str | None = None
    replicas: tuple[Replica, ...] = ()

    @property
    def healthy(self) -> bool:
        """A leader, and every follower online and current."""
        return self.exists and bool(self.leader) and all(r.current and not r.offline for r in self.replicas)


async def stream_health(conn: Connection, stream: str) -> StreamHealth:
    """``stream``'s health over ``conn`` (a :class:`~jsworker._errors.StreamRequestError` when
    the request fails; a missing stream is ``exists=False``)."""
    version = ".".join(map(str, conn.server_version))
    with failures_as(f"cannot read stream {stream}", StreamRequestError):
        try:
            info = await request_json(conn, api_subject("STREAM.INFO", stream))
        except ApiError as exc:
            if exc.failure.not_found:
                return StreamHealth(version, stream, exists=False)
            raise
    state: dict[str, Any] = info.get("state") or {}
    cluster: dict[str, Any] = info.get("cluster") or {}
    return StreamHealth(
        server_version=version,
        stream=stream,
        exists=True,
        messages=int(state.get("messages") or 0),
        bytes=int(state.get("bytes") or 0),
        cluster=cluster.get("name") or None,
        leader=cluster.get("leader") or None,
        replicas=tuple(_replica(r) for r in cluster.get("replicas") or () if isinstance(r, dict)),
    )


def _replica(raw: dict[str, Any]) -> Replica:
    return Replica(
        name=str(raw.get("name") or ""),
        current=bool(raw.get("current")),
        offline=bool(raw.get("offline")),
        lag=int(raw.get("lag") or 0),
        # The server gives nanoseconds.
        active=int(raw.get("active") or 0) / 1e9,
    )
