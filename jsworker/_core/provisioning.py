"""The provisioning step: every stream an app needs and its queues' consumers, created or
brought up to date by ``jsworker provision`` before the workers start.

On a server whose users hold the permissions ``jsworker permissions`` prints, only the
``provisioner`` role may create or update streams: workers, operators and dashboards may
not, so none of them can reshape a stream (make it copy another app's dead letters, say).
A worker that finds a stream missing or out of date there stops, naming this step
(:class:`~jsworker._errors.ProvisioningNeeded`). On a server without authentication workers
still do it themselves at start.

A queue's limits changed at run time (:func:`set_queue_limits`) are written here too, into its
consumers, and provisioning keeps them (see :mod:`jsworker._limits.overrides`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .._limits.overrides import DECLARED, KEYS, check_limits
from .._registry.entries import REGISTRY_SINCE, workers_bucket_spec
from ..jetstream.connection import Connection
from ..jetstream.topology import Change, ReplicasDiffer, apply_consumer, apply_stream, set_consumer_limits
from .layout import consumer_spec, queue_consumer_specs, relay_specs
from .view import AppView


@dataclass(frozen=True, slots=True)
class Provisioned:
    """What provisioning did to one stream or consumer; ``replicas`` when an existing
    stream's replicas differ from the app's (left as they are)."""

    kind: str  # "stream" or "consumer"
    name: str
    change: Change
    replicas: ReplicasDiffer | None = None

    def __str__(self) -> str:
        return f"{self.kind} {self.name}: {self.change.value}"


async def provision_app(
    app: AppView, conn: Connection, queues: Iterable[str] | None = None
) -> list[Provisioned]:
    """Create or update every stream of ``app`` (its own, its features', the worker
    registry's), the consumers of ``queues`` (default: every queue a task uses), those
    through which workers move delayed and fired jobs and those of the final-state handlers,
    in that order; idempotent."""
    specs = app.stream_specs(conn.server_version)
    # The registry's bucket is made by workers as they announce themselves on a server without
    # authentication; where they may not, it has to be here.
    if conn.server_version >= REGISTRY_SINCE:
        specs.append(workers_bucket_spec(app.namespace, app.options.replicas))
    done: list[Provisioned] = []
    for spec in specs:
        change, differ = await apply_stream(conn, spec)
        done.append(Provisioned("stream", spec.name, change, differ))
    consumers = queue_consumer_specs(app, queues if queues is not None else app.queues)
    consumers += relay_specs(app, conn.server_version)  # the moves of delayed and fired jobs
    consumers += app.final_state_specs(conn.server_version)
    for consumer in consumers:
        change = await apply_consumer(conn, consumer)
        done.append(Provisioned("consumer", f"{consumer.stream} > {consumer.name}", change))
    return done


async def set_queue_limits(
    app: AppView, conn: Connection, queue: str, asked: Mapping[str, Any]
) -> dict[str, str]:
    """Change the limits of ``queue`` (see :func:`check_limits`) on every consumer of it, made
    first where a consumer is missing: the overrides it keeps now, as
    :attr:`~jsworker.admin.QueueStatus.overrides` will show them."""
    changes = check_limits(app, queue, asked)
    specs = [consumer_spec(app, queue, k) for k in range(app.queue_streams(queue))]
    running = changes.get("max_running")
    # None: as it stands; the declared value (the spec's) for DECLARED; a number's own, with 0
    # for the app's max_ack_pending, the bound of a queue that declares none.
    if running is None:
        max_ack_pending = None
    elif running == DECLARED:
        max_ack_pending = specs[0].max_ack_pending
    else:
        max_ack_pending = int(running) or app.options.max_ack_pending
    updates = {KEYS[name]: None if value == DECLARED else value for name, value in changes.items()}
    kept = await asyncio.gather(
        *(set_consumer_limits(conn, spec, updates, max_ack_pending) for spec in specs)
    )
    return {name: kept[0][key] for name, key in KEYS.items() if key in kept[0]}
