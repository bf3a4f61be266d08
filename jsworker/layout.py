"""What an app keeps on the server: its streams (jobs and schedules, dead letters, the jobs
bucket, claims, events) and one durable pull consumer per queue, as specs that
:mod:`jsworker.jetstream.topology` creates or updates."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .jetstream.topology import ConsumerSpec, StreamSpec
from .lifecycle.bucket import BATCHED_SINCE, RECORDS_SINCE, jobs_bucket_spec
from .naming import validate_name
from .scheduling.claims import claims_spec
from .scheduling.declare import DELAYED_SINCE

if TYPE_CHECKING:
    from .app import App


def job_stream_spec(app: App, schedules: bool = True) -> StreamSpec:
    """The job stream; it also holds the schedules, which it allows when ``schedules``
    (servers before 2.12 have none)."""
    ns = app.namespace
    return StreamSpec(
        name=ns.stream,
        subjects=(ns.job_subjects, ns.schedule_subjects),
        work_queue=True,
        replicas=app.options.replicas,
        duplicate_window=app.options.duplicate_window,
        schedules=schedules,
    )


def dlq_spec(app: App) -> StreamSpec:
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


def events_spec(app: App) -> StreamSpec:
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


def stream_specs(app: App, server_version: tuple[int, ...]) -> list[StreamSpec]:
    """Every stream of ``app`` on a server of ``server_version``: the job and dead-letter
    streams, the jobs bucket (servers with per-message TTLs), the claims stream (servers with
    schedules) and the events stream if the app emits events."""
    schedules = server_version >= DELAYED_SINCE
    specs = [job_stream_spec(app, schedules), dlq_spec(app)]
    if server_version >= RECORDS_SINCE:
        batched = server_version >= BATCHED_SINCE
        specs.append(jobs_bucket_spec(app.namespace, app.options.replicas, batched=batched))
    if schedules:
        specs.append(claims_spec(app.namespace, app.options.replicas))
    if app.options.events:
        specs.append(events_spec(app))
    return specs


def consumer_spec(app: App, queue: str) -> ConsumerSpec:
    """The durable pull consumer of ``queue``: ``max_ack_pending`` is the queue's
    ``max_running`` when it declares one, else the app's ``max_ack_pending``."""
    declared = app.queue_options.get(queue)
    return ConsumerSpec(
        stream=app.namespace.stream,
        name=validate_name("queue", queue),
        filter_subject=app.namespace.queue_filter(queue),
        ack_wait=app.queue_ack_wait(queue),
        max_ack_pending=declared.max_running
        if declared is not None and declared.max_running is not None
        else app.options.max_ack_pending,
    )
