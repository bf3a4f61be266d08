"""Creating the app's streams and queue consumers, idempotently.

``jsworker provision`` runs this, and so do workers at start and producers when a publish
finds no stream (on a server whose users may do it), so several processes may race here;
creation is written to tolerate that. A user the server refuses a stream's create or update
gets :class:`~jsworker._errors.ProvisioningNeeded`, which names the command that fixes it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import nats.errors
import nats.js.errors
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)

from .._errors import PermissionDeniedError, ProvisioningNeeded, TopologyError
from .api import classify
from .connection import Connection

_STREAM_NAME_IN_USE = 10058


class Change(enum.Enum):
    """What provisioning did to a stream or consumer."""

    CREATED = "created"
    UPDATED = "updated"
    AS_IS = "as is"


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """A stream as jsworker wants it; times in seconds."""

    name: str
    subjects: tuple[str, ...]
    work_queue: bool
    replicas: int = 1
    duplicate_window: float = 120.0
    max_age: float = 0.0
    max_bytes: int = -1
    memory: bool = False
    max_msgs_per_subject: int = -1
    schedules: bool = False
    #: A key-value bucket: direct reads, rollups and per-message TTLs (servers 2.11+).
    kv: bool = False
    #: Fast batch publishing (servers 2.14+).
    batched: bool = False
    #: Atomic batch publishing and per-message TTLs (servers 2.12+): workflows.
    atomic: bool = False
    #: Every message adds to its subject's counter (servers 2.12+): workflows' tallies.
    counter: bool = False
    #: Per-message time to live (servers 2.11+) and direct reads: partition leases.
    ttl: bool = False

    def config(self) -> StreamConfig:
        """The nats-py config for this spec."""
        return StreamConfig(
            name=self.name,
            subjects=list(self.subjects),
            retention=RetentionPolicy.WORK_QUEUE if self.work_queue else RetentionPolicy.LIMITS,
            storage=StorageType.MEMORY if self.memory else StorageType.FILE,
            num_replicas=self.replicas,
            duplicate_window=self.duplicate_window,
            max_age=self.max_age,
            # Past max_bytes the oldest messages go (discard old): a full dead-letter or event
            # stream must never refuse a write, which would stop the worker settling jobs. The
            # job stream has no max_bytes, so JetStream refuses enqueues instead of dropping jobs.
            max_bytes=self.max_bytes,
            discard=DiscardPolicy.OLD,
            max_msgs_per_subject=self.max_msgs_per_subject,
            # Servers before 2.12 do not know the field: it is only sent when wanted.
            allow_msg_schedules=True if self.schedules else None,
            allow_direct=True if self.kv or self.ttl else None,
            allow_rollup_hdrs=self.kv,
            allow_msg_ttl=True if self.kv or self.atomic or self.ttl else None,
            allow_batched=True if self.batched else None,
            allow_atomic=True if self.atomic else None,
            allow_msg_counter=True if self.counter else None,
        )


@dataclass(frozen=True, slots=True)
class ReplicasDiffer:
    """An existing stream whose replicas are not the ones configured (left as they are)."""

    stream: str
    current: int
    wanted: int

    def __str__(self) -> str:
        return (
            f"stream {self.stream} has {self.current} replica(s), the app is configured for "
            f"{self.wanted}; jsworker does not change the replicas of an existing stream. Scale it "
            f"with: nats stream edit {self.stream} --replicas {self.wanted}"
        )


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """A queue's durable pull consumer; times in seconds."""

    stream: str
    name: str
    filter_subject: str
    ack_wait: float
    max_ack_pending: int
    replicas: int = 0

    def config(self) -> ConsumerConfig:
        """The nats-py config for this spec."""
        return ConsumerConfig(
            name=self.name,
            durable_name=self.name,
            filter_subject=self.filter_subject,
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            ack_wait=self.ack_wait,
            # Attempts are counted and enforced by the worker (so a dead job reaches the
            # dead-letter stream with its payload); the server must never drop one silently.
            max_deliver=-1,
            max_ack_pending=self.max_ack_pending,
            num_replicas=self.replicas or None,
        )


async def ensure_stream(conn: Connection, spec: StreamSpec) -> ReplicasDiffer | None:
    """Create the stream, or bring an existing one in line with ``spec`` except for its
    replicas, which are returned when they differ (see :func:`apply_stream`)."""
    return (await apply_stream(conn, spec))[1]


async def apply_stream(conn: Connection, spec: StreamSpec) -> tuple[Change, ReplicasDiffer | None]:
    """Create the stream, or bring an existing one in line with ``spec`` except for its
    replicas: what was done, and the replicas when they differ.

    Replicas are left alone because a worker is the wrong place to move a stream's data
    between servers: two deployments configured differently would flip it at every start, and
    scaling down drops copies. Raises :class:`TopologyError` when a stream of that name exists
    with another retention or for other subjects: updating it would hijack somebody else's data;
    :class:`ProvisioningNeeded` when the server refuses this user the create or update.
    """
    unanswered: nats.errors.TimeoutError | None = None
    for _ in range(3):
        try:
            info = await conn.js.stream_info(spec.name)
        except nats.js.errors.NotFoundError:
            try:
                await conn.js.add_stream(spec.config())
                return Change.CREATED, None
            except PermissionDeniedError as exc:
                raise ProvisioningNeeded(spec.name, "create", exc.subject) from exc
            except nats.js.errors.BadRequestError as exc:
                if exc.err_code == _STREAM_NAME_IN_USE:
                    continue  # another process created it between our two calls
                raise _failed(f"cannot create stream {spec.name}", exc) from exc
            except nats.errors.TimeoutError as exc:
                # A busy cluster's meta leader may answer after the request's timeout and
                # still create the stream: read it again, and create it if it is not there
                # (a create of the same config is no change to the server).
                unanswered = exc
                continue
            except nats.errors.Error as exc:
                raise _failed(f"cannot create stream {spec.name}", exc) from exc
        except nats.errors.Error as exc:
            raise _failed(f"cannot read stream {spec.name}", exc) from exc
        change, differ = await _reconcile_stream(conn, spec, info.config)
        # Found as sent after a create that went unanswered: most likely that create made it.
        return (Change.CREATED if unanswered and change is Change.AS_IS else change), differ
    if unanswered is not None:
        raise _failed(f"cannot create stream {spec.name}", unanswered) from unanswered
    raise TopologyError(f"stream {spec.name} keeps appearing and disappearing")


async def _reconcile_stream(
    conn: Connection, spec: StreamSpec, current: StreamConfig
) -> tuple[Change, ReplicasDiffer | None]:
    wanted = spec.config()
    replicas = current.num_replicas or 1
    differ = ReplicasDiffer(spec.name, replicas, spec.replicas) if replicas != spec.replicas else None
    wanted.num_replicas = replicas
    if current.allow_msg_schedules and not spec.schedules:
        # The server cannot turn schedules off, and honours rollups wherever they are on.
        raise TopologyError(
            f"stream {spec.name} allows message schedules (an earlier jsworker kept them there), so "
            "the server honours rollups on it from anyone who may publish to it; it cannot be changed "
            "in place. Move to the new layout: stop the producers, let the workers finish what waits "
            f"(jsworker status), stop them, remove the stream (nats stream rm {spec.name}), then run "
            "jsworker provision. Delayed jobs still in it are lost; periodic schedules come back from "
            "the code"
        )
    # A stream made by an older jsworker may lack subjects added since: adding subjects is safe.
    if current.retention != wanted.retention or not set(current.subjects or []) <= set(spec.subjects):
        raise TopologyError(
            f"stream {spec.name} exists with retention {current.retention} and subjects "
            f"{current.subjects}; jsworker expects {wanted.retention} on {list(spec.subjects)}. "
            "Does something else on this server use that stream name?"
        )
    if not stream_differences(current, spec):
        return Change.AS_IS, differ
    if current.allow_msg_schedules:
        wanted.allow_msg_schedules = True
    if current.allow_batched:
        wanted.allow_batched = True
    try:
        await conn.js.update_stream(wanted)
    except PermissionDeniedError as exc:
        raise ProvisioningNeeded(spec.name, "update", exc.subject) from exc
    except nats.errors.Error as exc:
        raise _failed(f"cannot update stream {spec.name}", exc) from exc
    return Change.UPDATED, differ


def stream_differences(current: StreamConfig, spec: StreamSpec) -> list[str]:
    """How stream ``current`` (as the server holds it) differs from ``spec``, replicas aside
    (see :func:`apply_stream`): one phrase per setting, empty when it is as declared."""
    wanted = spec.config()
    subjects = sorted(current.subjects or [])
    ttls = spec.kv or spec.atomic or spec.ttl
    said = [
        (_close(current.duplicate_window, wanted.duplicate_window), "duplicate window",
         current.duplicate_window, wanted.duplicate_window),
        (_close(current.max_age, wanted.max_age), "max age", current.max_age, wanted.max_age),
        ((current.max_bytes or -1) == wanted.max_bytes, "max bytes", current.max_bytes, wanted.max_bytes),
        (current.discard == wanted.discard, "discard", current.discard, wanted.discard),
        (subjects == sorted(spec.subjects), "subjects", subjects, sorted(spec.subjects)),
        ((current.max_msgs_per_subject or -1) == wanted.max_msgs_per_subject, "max messages per subject",
         current.max_msgs_per_subject, wanted.max_msgs_per_subject),
        # Schedules, once allowed, cannot be turned off again; a spec without them leaves them.
        (bool(current.allow_msg_schedules) or not spec.schedules, "message schedules", False, True),
        (bool(current.allow_msg_ttl) or not ttls, "message TTLs", False, True),
        (bool(current.allow_atomic) or not spec.atomic, "atomic batches", False, True),
        (bool(current.allow_batched) or not spec.batched, "batched publishing", False, True),
    ]  # fmt: skip
    return _phrases(said)


def _phrases(said: Sequence[tuple[bool, str, object, object]]) -> list[str]:
    """``<setting> <value now> (declared <value>)`` for each setting that is not the same."""
    return [
        f"{what} {_shown(now)} (declared {_shown(wanted)})" for same, what, now, wanted in said if not same
    ]


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}s"
    return str(getattr(value, "value", value))


async def stream_drift(conn: Connection, spec: StreamSpec) -> list[str] | None:
    """:func:`stream_differences` of the stream on the server; None when it does not exist."""
    try:
        info = await conn.js.stream_info(spec.name)
    except nats.js.errors.NotFoundError:
        return None
    except nats.errors.Error as exc:
        raise _failed(f"cannot read stream {spec.name}", exc) from exc
    return stream_differences(info.config, spec)


async def stream_exists(conn: Connection, name: str) -> bool:
    """Whether stream ``name`` exists; TopologyError when the server cannot say."""
    try:
        await conn.js.stream_info(name)
    except nats.js.errors.NotFoundError:
        return False
    except nats.errors.Error as exc:
        raise _failed(f"cannot read stream {name}", exc) from exc
    return True


async def ensure_consumer(conn: Connection, spec: ConsumerSpec) -> None:
    """Create the durable consumer or update it in place (the server's create is an upsert)."""
    await _upsert(conn, spec.stream, spec.config())


#: A consumer's metadata key that says its ``max_ack_pending`` was set at run time (see
#: :func:`set_consumer_limits`): provisioning keeps it rather than put the code's back.
SET_MAX_ACK_PENDING = "jsw_max_running"
# jsworker's own keys in a consumer's metadata (the server adds some of its own, "_nats.*").
_OWN_METADATA = "jsw_"


async def apply_consumer(conn: Connection, spec: ConsumerSpec) -> Change:
    """:func:`ensure_consumer`, reading the consumer first to tell what it changed (an
    unchanged consumer is not written). What was set at run time stays: jsworker's keys in
    its metadata, and its ``max_ack_pending`` while they say it was set."""
    try:
        current = (await conn.js.consumer_info(spec.stream, spec.name)).config
    except nats.js.errors.NotFoundError:
        try:
            await ensure_consumer(conn, spec)
        except PermissionDeniedError as exc:
            raise ProvisioningNeeded(spec.stream, "create", exc.subject, consumer=spec.name) from exc
        return Change.CREATED
    except nats.errors.Error as exc:
        raise _failed(f"cannot read consumer {spec.name} on {spec.stream}", exc) from exc
    wanted = _wanted_consumer(current, spec)
    if not consumer_differences(current, wanted):
        return Change.AS_IS
    try:
        await _upsert(conn, spec.stream, wanted)
    except PermissionDeniedError as exc:
        raise ProvisioningNeeded(spec.stream, "update", exc.subject, consumer=spec.name) from exc
    return Change.UPDATED


def _wanted_consumer(current: ConsumerConfig, spec: ConsumerSpec) -> ConsumerConfig:
    """``spec``'s config with what was set at run time on ``current`` kept (see
    :func:`set_consumer_limits`)."""
    wanted = spec.config()
    kept = {k: v for k, v in (current.metadata or {}).items() if k.startswith(_OWN_METADATA)}
    if kept:
        wanted.metadata = kept
    if SET_MAX_ACK_PENDING in kept and current.max_ack_pending is not None:
        wanted.max_ack_pending = current.max_ack_pending
    return wanted


def consumer_differences(current: ConsumerConfig, wanted: ConsumerConfig) -> list[str]:
    """How consumer ``current`` differs from ``wanted`` in what provisioning sets: one phrase
    per setting, empty when it is as wanted."""
    said = [
        (current.filter_subject == wanted.filter_subject, "filter", current.filter_subject,
         wanted.filter_subject),
        (_close(current.ack_wait, wanted.ack_wait), "ack wait", current.ack_wait, wanted.ack_wait),
        (current.max_ack_pending == wanted.max_ack_pending, "max ack pending", current.max_ack_pending,
         wanted.max_ack_pending),
        (current.max_deliver == wanted.max_deliver, "max deliver", current.max_deliver, wanted.max_deliver),
        (current.ack_policy == wanted.ack_policy, "ack policy", current.ack_policy, wanted.ack_policy),
    ]  # fmt: skip
    return _phrases(said)


async def consumer_drift(conn: Connection, spec: ConsumerSpec) -> list[str] | None:
    """:func:`consumer_differences` of the consumer on the server from ``spec`` (what was set
    at run time kept); None when it does not exist."""
    try:
        current = (await conn.js.consumer_info(spec.stream, spec.name)).config
    except nats.js.errors.NotFoundError:
        return None
    except nats.errors.Error as exc:
        raise _failed(f"cannot read consumer {spec.name} on {spec.stream}", exc) from exc
    return consumer_differences(current, _wanted_consumer(current, spec))


async def set_consumer_limits(
    conn: Connection, spec: ConsumerSpec, changes: Mapping[str, str | None], max_ack_pending: int | None
) -> dict[str, str]:
    """Change jsworker's keys in a consumer's metadata (a key with None is removed) and, unless
    None, its ``max_ack_pending``; made as ``spec`` first where it does not exist, the rest of
    it as it stands on the server (paused or not). Returns jsworker's keys it keeps now."""
    try:
        current = (await conn.js.consumer_info(spec.stream, spec.name)).config
    except nats.js.errors.NotFoundError:
        current = spec.config()
    except nats.errors.Error as exc:
        raise _failed(f"cannot read consumer {spec.name} on {spec.stream}", exc) from exc
    # The server's own keys ("_nats.*") are the server's to set.
    metadata = {k: v for k, v in (current.metadata or {}).items() if not k.startswith("_nats.")}
    for key, value in changes.items():
        if value is None:
            metadata.pop(key, None)
        else:
            metadata[key] = value
    current.metadata = metadata or None
    if max_ack_pending is not None:
        current.max_ack_pending = max_ack_pending
    await _upsert(conn, spec.stream, current)
    return {k: v for k, v in metadata.items() if k.startswith(_OWN_METADATA)}


async def _upsert(conn: Connection, stream: str, config: ConsumerConfig) -> None:
    try:
        await conn.js.add_consumer(stream, config)
    except nats.errors.Error as exc:
        raise _failed(f"cannot create or update consumer {config.name} on {stream}", exc) from exc


def _failed(what: str, exc: BaseException) -> TopologyError:
    """A TopologyError for ``exc``, transient when the server did not (or could not yet) answer."""
    failure = classify(exc)
    if failure.code and not failure.transient:
        return TopologyError(f"{what}: {failure.text} (code {failure.err_code})")
    return TopologyError(f"{what}: {failure.text}", transient=True)


def _close(a: float | None, b: float | None) -> bool:
    return abs((a or 0.0) - (b or 0.0)) < 1e-3
