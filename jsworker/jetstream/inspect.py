"""Read-only facts about an app's streams and consumers, straight from the JetStream API.

Everything here is one request (or one page of requests) to ``$JS.API``; nothing is created,
changed or acknowledged, so it is safe to run against a production server at any time.

The raw API is used rather than nats-py's ``JetStreamManager`` because its parsed objects drop
the server's own clock (``ts``), and ages measured against the server's clock are immune to skew
between the machine running ``jsworker status`` and the server. Times leave this module as unix
seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import nats.errors
import nats.js.errors
from nats.js.api import ConsumerInfo

from .._errors import ConnectError, JsworkerError, TopologyError
from .api import REQUEST_ERRORS, UNAVAILABLE, ApiError, api_subject, classify, request_json
from .connection import Connection
from .limits_stream import LimitsStream, StoredMessage

_Key = TypeVar("_Key")


@dataclass(frozen=True, slots=True)
class StreamFacts:
    """A stream's stored message counts per subject, as the server reported them.

    ``server_time`` is the server's clock when it answered (unix seconds), or None when the
    server is too old to say (before 2.10).
    """

    name: str
    exists: bool
    first_seq: int = 0
    subjects: dict[str, int] | None = None
    server_time: float | None = None


@dataclass(frozen=True, slots=True)
class ConsumerFacts:
    """One consumer's delivery state (``CONSUMER.INFO``); counts are the server's own."""

    name: str
    filter_subject: str
    num_pending: int  # matching messages not yet delivered to anyone
    num_ack_pending: int  # delivered, not yet acked or terminated (naks waiting included)
    num_redelivered: int  # of those, delivered more than once
    num_waiting: int  # pull requests outstanding on the server
    delivered_stream_seq: int  # highest stream sequence delivered so far
    max_ack_pending: int = 0  # the cap on num_ack_pending (0: none known)
    delivered_consumer_seq: int = 0  # deliveries made so far, redeliveries included
    paused: bool = False  # paused on the server (CONSUMER.PAUSE, 2.11+): hands out nothing
    metadata: Mapping[str, str] = field(default_factory=dict)  # its config's (2.10+)


class _NotFound(Exception):
    pass


async def _request(conn: Connection, subject: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    """One JetStream API call; raises _NotFound on 404, jsworker errors otherwise."""
    try:
        return await request_json(conn, api_subject(subject), payload)
    except REQUEST_ERRORS as exc:
        failure = classify(exc)
        if failure.not_found:
            raise _NotFound(failure.text) from exc
        if failure.code == UNAVAILABLE and not isinstance(exc, ApiError):
            # Nobody listens on $JS.API: JetStream is off, or this account has none.
            raise ConnectError("JetStream is not enabled on the server (no responders on $JS.API)") from exc
        if failure.code:
            raise TopologyError(
                f"JetStream refused {subject}: {failure.text} (code {failure.err_code})",
                # 503: no leader (an election, a restart); asking again later may work.
                transient=failure.transient,
            ) from exc
        if conn.is_connected and failure.transient:
            # Connected, and no answer in time: a stream without a leader (its nodes down, an
            # election) is silent, not unreachable.
            silent = f"JetStream did not answer {subject}: {failure.text}"
            raise TopologyError(silent, transient=True) from exc
        raise ConnectError(f"JetStream request {subject} failed: {failure.text}") from exc


def _unix(stamp: object) -> float | None:
    """RFC 3339 time from the server (nanosecond fraction, ``Z``) as unix seconds."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        # Python 3.11's fromisoformat takes "Z" and truncates digits beyond microseconds.
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


async def stream_facts(conn: Connection, stream: str, subjects_filter: str) -> StreamFacts:
    """Per-subject message counts of ``stream`` for subjects matching ``subjects_filter``.

    A stream that does not exist is reported with ``exists=False``, not raised. The server
    pages subject details (100,000 per answer by default); every page is read.
    """
    subjects: dict[str, int] = {}
    first: dict[str, Any] | None = None
    while True:
        try:
            body = await _request(
                conn, f"STREAM.INFO.{stream}", {"subjects_filter": subjects_filter, "offset": len(subjects)}
            )
        except _NotFound:
            return StreamFacts(name=stream, exists=False)
        first = first or body
        page = (body.get("state") or {}).get("subjects") or {}
        subjects.update({str(k): int(v) for k, v in page.items()})
        # "total" counts matching subjects; stop when all are read or a page brings nothing new.
        if not page or len(subjects) >= int(body.get("total") or 0):
            break
    state = first.get("state") or {}
    return StreamFacts(
        name=stream,
        exists=True,
        first_seq=int(state.get("first_seq") or 0),
        subjects=subjects,
        server_time=_unix(first.get("ts")),
    )


async def consumer_facts(conn: Connection, stream: str) -> list[ConsumerFacts]:
    """Every consumer of ``stream`` (all pages of ``CONSUMER.LIST``); [] when it does not exist."""
    found: list[ConsumerFacts] = []
    seen = 0
    while True:
        try:
            body = await _request(conn, f"CONSUMER.LIST.{stream}", {"offset": seen})
        except _NotFound:
            return found
        page = body.get("consumers") or []
        seen += len(page)
        found.extend(_consumer(info) for info in page if isinstance(info, dict))
        if not page or seen >= int(body.get("total") or 0):
            return found


def _consumer(info: dict[str, Any]) -> ConsumerFacts:
    config = info.get("config") or {}
    delivered = info.get("delivered") or {}
    return ConsumerFacts(
        name=str(info.get("name") or config.get("durable_name") or ""),
        filter_subject=str(config.get("filter_subject") or ""),
        num_pending=int(info.get("num_pending") or 0),
        num_ack_pending=int(info.get("num_ack_pending") or 0),
        num_redelivered=int(info.get("num_redelivered") or 0),
        num_waiting=int(info.get("num_waiting") or 0),
        delivered_stream_seq=int(delivered.get("stream_seq") or 0),
        max_ack_pending=int(config.get("max_ack_pending") or 0),
        delivered_consumer_seq=int(delivered.get("consumer_seq") or 0),
        paused=bool(info.get("paused")),
        metadata={str(k): str(v) for k, v in (config.get("metadata") or {}).items()},
    )


async def first_stored_time(conn: Connection, stream: str, subject: str, from_seq: int) -> float | None:
    """When the server stored the first message on ``subject`` at or after ``from_seq``.

    Unix seconds, or None when there is no such message (or no stream). One
    ``STREAM.MSG.GET`` with ``next_by_subj``: the server finds it through its per-subject
    index, not by scanning messages, but the answer carries the message's body.
    """
    try:
        body = await _request(
            conn, f"STREAM.MSG.GET.{stream}", {"seq": max(from_seq, 0), "next_by_subj": subject}
        )
    except _NotFound:
        return None
    return _unix((body.get("message") or {}).get("time"))


async def first_stored_times(
    conn: Connection, stream: str, starts: dict[_Key, tuple[str, int]]
) -> dict[_Key, float | None]:
    """:func:`first_stored_time` for several keys at once: ``{key: (subject, from_seq)}``."""
    keys = list(starts)
    found = await asyncio.gather(*(first_stored_time(conn, stream, *starts[k]) for k in keys))
    return dict(zip(keys, found, strict=True))


async def delivered_seq(conn: Connection, stream: str, consumer: str) -> int:
    """The last stream sequence ``consumer`` handed out (0: none, or no such consumer).

    Through nats-py's JetStream manager: no time is read, so the server's clock is not needed.
    """
    info = await _consumer_info(conn, stream, consumer)
    return int(info.delivered.stream_seq or 0) if info is not None and info.delivered is not None else 0


async def waiting_count(conn: Connection, stream: str, consumer: str) -> int:
    """How many messages ``consumer`` has not handed out yet (0 when there is no such consumer)."""
    info = await _consumer_info(conn, stream, consumer)
    return int(info.num_pending or 0) if info is not None else 0


@dataclass(frozen=True, slots=True)
class ConsumerPlace:
    """Where a consumer stands: its ack floor (a stream sequence: every message at or below it
    is done), and its leader's term (the server leading it and since when; (None, None) on a
    server with no clustering), which changes with every election."""

    ack_floor: int
    term: tuple[str | None, datetime | None]


async def consumer_place(conn: Connection, stream: str, consumer: str) -> ConsumerPlace | None:
    """Where ``consumer`` of ``stream`` stands (one ``CONSUMER.INFO``); None without it."""
    info = await _consumer_info(conn, stream, consumer)
    if info is None:
        return None
    floor = int(info.ack_floor.stream_seq or 0) if info.ack_floor is not None else 0
    cluster = info.cluster
    term = (cluster.leader, cluster.leader_since) if cluster is not None else (None, None)
    return ConsumerPlace(floor, term)


async def stored_up_to(
    conn: Connection, stream: str, subjects: str, last: int, most: int
) -> list[StoredMessage]:
    """The first ``most`` messages on ``subjects`` that ``stream`` stores at or before sequence
    ``last``, oldest first.

    One ``STREAM.MSG.GET`` (next by subject) for each message found and one more. The server
    finds each through its subject index, at a cost that grows with the number of subjects
    matching ``subjects`` (about 14 ms of its CPU at 300,000 waiting jobs of one queue): not
    something to ask on every turn.
    """
    found: list[StoredMessage] = []
    reader = LimitsStream(conn, stream)
    seq = 1
    while seq <= last and len(found) < most:
        message = await reader.next(subjects, seq)
        if message is None or message.seq > last:
            break
        found.append(message)
        seq = message.seq + 1
    return found


async def _consumer_info(conn: Connection, stream: str, consumer: str) -> ConsumerInfo | None:
    try:
        info: ConsumerInfo = await conn.js.consumer_info(stream, consumer)
    except nats.js.errors.NotFoundError:
        return None
    except (nats.errors.Error, OSError) as exc:
        raise JsworkerError(f"cannot read consumer {consumer} of {stream}: {exc}") from exc
    return info
