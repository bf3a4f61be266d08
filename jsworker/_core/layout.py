"""What an app keeps on the server, as specs that :mod:`jsworker.jetstream.topology` creates or
updates: its own streams (jobs, schedules, dead letters, events), one durable pull consumer
per queue and the two through which workers move delayed and fired jobs. The features'
streams (the jobs bucket, claims) are theirs; the app joins
them all (:meth:`jsworker.App.stream_specs`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .._errors import ConfigurationError
from .._limits.partitions import LEASE_TTL
from .._wire.names import validate_name
from ..jetstream.topology import ConsumerSpec, StreamSpec

if TYPE_CHECKING:
    from .view import AppView


def job_stream_specs(app: AppView, schedules: bool = True) -> list[StreamSpec]:
    """The job streams, which producers write: they honour no header by which a publisher could
    remove or repeat a message (no rollups, schedules or per-message TTLs). The first holds
    partition 0 and what waits to become a job (delayed jobs, workflows, fair queues' intakes);
    each other partition has a stream of its own, with a leader of its own. ``schedules``: the
    server has message schedules and atomic batches (2.12 and later)."""
    first = _first_job_stream(app, schedules)
    ns = app.namespace
    # The others' jobs come as single publishes: from producers, the fired-jobs move, replays.
    return [first] + [
        dataclasses.replace(
            first, name=ns.partition_stream(k), subjects=(ns.partition_subjects(k),), atomic=False
        )
        for k in range(1, app.partition_count)
    ]


def _first_job_stream(app: AppView, schedules: bool) -> StreamSpec:
    ns = app.namespace
    # Workflows keep their definitions and states beside their jobs: a step and the state
    # write that records it are stored in one atomic batch (servers with schedules have those).
    flows = app.options.workflows and schedules
    # Jobs for a fair queue move into it by atomic batches (:mod:`jsworker._limits.fair`).
    fair = bool(app.fair_queues)
    if fair and not schedules:
        raise ConfigurationError("fair queues need nats-server 2.12 or later (atomic batch publish)")
    return StreamSpec(
        name=ns.stream,
        subjects=(
            ns.job_subjects,
            # The markers of unique delayed jobs (see jsworker._scheduling.markers): in every
            # app's stream, whatever tasks the process declares, so that every process of
            # the app expects the same subjects.
            *([ns.later_subjects, ns.mark_subjects] if schedules else []),
            *([ns.flow_subjects] if flows else []),
            *([ns.intake_subjects] if fair else []),
        ),
        work_queue=True,
        replicas=app.options.replicas,
        duplicate_window=app.options.duplicate_window,
        atomic=flows or fair,
    )


def schedules_spec(app: AppView) -> StreamSpec:
    """The schedules stream (servers 2.12 and later): delayed jobs' and periodic schedules, and
    the jobs they fire until a worker moves them into their queues. Only workers and operators
    write it: the server allows rollups on any stream that allows schedules."""
    ns = app.namespace
    return StreamSpec(
        name=ns.schedules_stream,
        subjects=(ns.schedule_subjects, ns.fired_subjects),
        work_queue=True,
        replicas=app.options.replicas,
        duplicate_window=app.options.duplicate_window,
        schedules=True,
    )


#: The consumers through which workers move delayed jobs from the job stream into the
#: schedules stream, and fired jobs from there into their queues. Queue names may not start
#: with ``_jsw``, so no queue's consumer takes these names.
LATER_CONSUMER = "_jsw_later"
_RELAY_ACK_WAIT = 10.0
FIRED_CONSUMER = "_jsw_fired"


#: nats-server versions that store and fire message schedules (and so have a schedules stream).
SCHEDULES_SINCE = (2, 12, 0)


def relay_specs(app: AppView, server_version: tuple[int, ...]) -> list[ConsumerSpec]:
    """The consumers of the two moves on a server of ``server_version`` (none before 2.12):
    delayed jobs into schedules, fired jobs into their queues. A batch moves in milliseconds,
    and both moves are idempotent: a message not acknowledged in ten seconds (its worker died,
    or a server restart lost the ack) is moved again, by any worker."""
    if server_version < SCHEDULES_SINCE:
        return []
    ns = app.namespace
    moves = (
        (ns.stream, LATER_CONSUMER, ns.later_subjects),
        (ns.schedules_stream, FIRED_CONSUMER, ns.fired_subjects),
    )
    return [
        ConsumerSpec(stream, name, subjects, ack_wait=_RELAY_ACK_WAIT, max_ack_pending=10_000)
        for stream, name, subjects in moves
    ]


#: A final-state handler's consumer on the jobs bucket is named this and the handler's name.
FINAL_STATE_CONSUMER = "_jsw_final_"
# The record a handler is called with is told in progress while the call lasts (see
# jsworker._lifecycle.finals): this is how soon records a killed worker held come back.
_FINAL_STATE_ACK_WAIT = 15.0
_FINAL_STATE_PENDING = 1000


def final_state_spec(app: AppView, handler: str) -> ConsumerSpec:
    """The durable consumer through which workers hand the final-state handler ``handler``
    every record the jobs bucket stores: a handler declared later starts with the records
    the bucket still keeps, and one that stopped goes on where it stopped. Made by the
    provisioning step: workers only pull from it."""
    return ConsumerSpec(
        stream=app.namespace.jobs_stream,
        name=FINAL_STATE_CONSUMER + validate_name("final-state handler", handler),
        filter_subject=app.namespace.record_subject(),
        ack_wait=_FINAL_STATE_ACK_WAIT,
        max_ack_pending=_FINAL_STATE_PENDING,
    )


def dlq_spec(app: AppView) -> StreamSpec:
    """The dead-letter stream."""
    ns, options = app.namespace, app.options
    return StreamSpec(
        name=ns.dlq_stream,
        subjects=(ns.dlq_subjects,),
        work_queue=False,
        replicas=options.replicas,
        duplicate_window=min(options.duplicate_window, options.dlq_max_age),
        max_age=options.dlq_max_age,
        max_bytes=options.dlq_max_bytes,
    )


#: Seconds a depth sample's id is remembered: longer than a sampling slot.
DEPTH_DEDUP = 120.0


def events_spec(app: AppView) -> StreamSpec:
    """The job-event stream (used when the app emits events)."""
    ns, options = app.namespace, app.options
    return StreamSpec(
        name=ns.events_stream,
        subjects=(ns.events_subjects,),
        work_queue=False,
        replicas=options.replicas,
        # Events carry no Nats-Msg-Id; the window only has to be valid (<= max_age).
        duplicate_window=min(1.0, options.events_max_age),
        max_age=options.events_max_age,
        max_bytes=options.events_max_bytes,
    )


def depth_spec(app: AppView) -> StreamSpec:
    """The queues' depth samples (with job events on, kept as long as the events): a stream of
    their own, so that every message of the events stream stays a job event for its readers."""
    ns, options = app.namespace, app.options
    return StreamSpec(
        name=ns.depth_stream,
        subjects=(ns.depth_subjects,),
        work_queue=False,
        replicas=options.replicas,
        # A sample's Nats-Msg-Id names its queue and time slot, so that of a fleet's workers
        # sampling the same slot one is stored (see jsworker.events._depth).
        duplicate_window=min(DEPTH_DEDUP, options.events_max_age),
        max_age=options.events_max_age,
    )


#: How long the record of a micro-batch a Spark streaming sink committed is kept: a query
#: restarted from its checkpoint within this time skips a batch it already wrote, however long
#: after the job stream's duplicate window.
SINK_BATCHES_MAX_AGE = 30 * 86400.0


def sinks_spec(app: AppView) -> StreamSpec:
    """The micro-batches Spark streaming sinks committed (``App(spark_sinks=True)``): one
    message a batch, written once (its writer expects its subject empty), kept
    :data:`SINK_BATCHES_MAX_AGE`. Producers write it: it honours no header that removes a
    message (no rollups, no per-message TTLs)."""
    ns = app.namespace
    return StreamSpec(
        name=ns.sinks_stream,
        subjects=(ns.sink_subject(),),
        work_queue=False,
        replicas=app.options.replicas,
        duplicate_window=60.0,
        max_age=SINK_BATCHES_MAX_AGE,
        max_msgs_per_subject=1,
    )


def consumer_spec(app: AppView, queue: str, partition: int = 0) -> ConsumerSpec:
    """The durable pull consumer of ``queue`` on the stream of ``partition``, named as the queue:
    ``max_ack_pending`` is the queue's ``max_running`` when it declares one (a queue of one
    partition), else the app's ``max_ack_pending``."""
    if queue.startswith("_jsw"):
        raise ConfigurationError(f"invalid queue name {queue!r}: names starting '_jsw' are jsworker's own")
    declared = app.queue_options.get(queue)
    return ConsumerSpec(
        stream=app.namespace.partition_stream(partition),
        name=validate_name("queue", queue),
        filter_subject=app.namespace.queue_filter(queue, partition),
        ack_wait=app.queue_ack_wait(queue),
        max_ack_pending=declared.max_running
        if declared is not None and declared.max_running is not None
        else app.options.max_ack_pending,
    )


def queue_consumer_specs(app: AppView, queues: Iterable[str]) -> list[ConsumerSpec]:
    """The consumers of ``queues``: one on the stream of each partition of each queue."""
    return [consumer_spec(app, q, k) for q in queues for k in range(app.queue_streams(q))]


def tally_spec(app: AppView) -> StreamSpec:
    """The workflows' tallies: one counter a workflow, kept as long as its state."""
    ns, options = app.namespace, app.options
    return StreamSpec(
        name=ns.tally_stream,
        subjects=(ns.tally_subject(),),
        work_queue=False,
        replicas=options.replicas,
        duplicate_window=min(options.duplicate_window, options.workflow_ttl),
        max_age=options.workflow_ttl,
        counter=True,
    )


def rates_spec(app: AppView) -> StreamSpec:
    """The rate limits' counters: one message a subject (the counter's latest), kept two hours
    (past the longest window, a tenth of an hour)."""
    ns, options = app.namespace, app.options
    return StreamSpec(
        name=ns.rates_stream,
        subjects=(ns.rate_subject(),),
        work_queue=False,
        replicas=options.replicas,
        duplicate_window=1.0,
        max_age=7200.0,
        max_msgs_per_subject=1,
        counter=True,
    )


#: The leases stream's max age: whatever message stands on a lease subject is gone this long
#: after it was written, a message that carries no time to live of its own included, while a
#: lease held by a live worker is written anew every LEASE_TTL / 3.
LEASES_MAX_AGE = 4.0 * LEASE_TTL


def leases_spec(app: AppView) -> StreamSpec:
    """The partition leases: one message a lease subject, each with its time to live, none
    older than :data:`LEASES_MAX_AGE`."""
    ns = app.namespace
    return StreamSpec(
        name=ns.leases_stream,
        subjects=(ns.lease_subjects,),
        work_queue=False,
        replicas=app.options.replicas,
        duplicate_window=1.0,
        max_age=LEASES_MAX_AGE,
        max_msgs_per_subject=1,
        ttl=True,
    )
