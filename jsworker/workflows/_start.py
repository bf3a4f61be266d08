"""Starting a workflow: its definition and its first jobs, stored all or none."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._enqueue.calls import check_job_id
from .._enqueue.receipt import Job
from .._enqueue.task import Signature
from .._errors import (
    ConfigurationError,
    EnqueueError,
    JsworkerError,
    PermissionDeniedError,
    TopologyError,
    WriteRefused,
)
from ..jetstream.atomic import MAX_BATCH, BatchConflict, publish_atomic
from ..jetstream.limits_stream import LimitsStream
from ..jetstream.message import OutMessage, Stored
from ._build import step_message
from ._definition import FLOW, FLOW_STEP, START, WORKFLOWS_SINCE, FlowDef, OnFailure

if TYPE_CHECKING:
    from .._enqueue.calls import Call
    from .._enqueue.task import Task, TaskOwner
    from ..jetstream.connection import Connection


# Seconds between two tries of a batch that got no answer.
_PAUSE = 0.25


def new_flow_id(flow_id: str | None) -> str:
    """``flow_id`` checked as a job id (derived step ids add up to 4 characters), or a new one."""
    if flow_id is None:
        return uuid.uuid4().hex
    check_job_id(flow_id)
    if len(flow_id) > 120:
        raise ConfigurationError(f"a workflow id has at most 120 characters, not {len(flow_id)}")
    return flow_id


def describe_all(sigs: Sequence[Signature], what: str) -> list[dict[str, Any]]:
    """The steps' descriptions; ConfigurationError for anything that is not a signature. A
    chain's steps after the first are given the result before them; a group's members none."""
    out = []
    for i, sig in enumerate(sigs):
        if not isinstance(sig, Signature):
            raise ConfigurationError(f"{what} takes signatures (task.s(...)), not {type(sig).__name__}")
        out.append(sig.describe(after_result=what == "chain" and i > 0))
    if not out:
        raise ConfigurationError(f"{what} needs at least one signature")
    return out


async def start(app: TaskOwner, flow: FlowDef, first: dict[str, Any]) -> None:
    """Store ``flow``'s definition and the jobs of its first steps (``first``: step label ->
    description): in one atomic batch when they fit one, else the definition with the first
    batch and the rest in batches of their own, each all or none."""
    await _check(app)
    conn = await app.connections.connection()
    ttl = app.options.workflow_ttl
    msgs = [flow.message(app.namespace, app.serializer, ttl)]
    msgs += [step_message(app, flow.id, step, described) for step, described in first.items()]
    try:
        for i in range(0, len(msgs), MAX_BATCH):
            await _publish(app, conn, msgs[i : i + MAX_BATCH], first=i == 0)
    except BatchConflict as exc:
        raise EnqueueError(f"workflow {flow.id} exists already: {exc}", job_id=flow.id) from exc
    except WriteRefused as exc:
        raise EnqueueError(f"cannot start workflow {flow.id}: {exc}", job_id=flow.id) from exc


async def _publish(app: TaskOwner, conn: Connection, msgs: list[OutMessage], first: bool) -> Stored:
    """Store one batch of a workflow's start (``first``: the one with its definition). A try
    with no answer (a stream electing its leader, or none yet on a fresh server) may have been
    stored: the batch is sent again for up to the app's ``publish_timeout``, and a conflict
    after such a try is this call's own write when the server holds what it wrote."""
    deadline = time.monotonic() + app.options.publish_timeout
    unanswered = False
    while True:
        try:
            return await publish_atomic(conn, msgs)
        except BatchConflict:
            if unanswered and (stored := await _written_before(app, conn, msgs, first)) is not None:
                return stored
            raise
        except WriteRefused as exc:
            if exc.err_code or time.monotonic() >= deadline:
                raise
            if first and not unanswered:
                # Perhaps no stream answered: the app's first enqueue on a fresh server. Create
                # the streams (a user that may not waits for a worker to) and try at once.
                with contextlib.suppress(PermissionDeniedError, TopologyError):
                    await app.provision_streams(conn)
            else:
                # While a stream elects its leader, each try is answered at once.
                await asyncio.sleep(_PAUSE)
            unanswered = True


async def _written_before(
    app: TaskOwner, conn: Connection, msgs: list[OutMessage], first: bool
) -> Stored | None:
    """What the server says of ``msgs`` when an earlier, unanswered try of this call stored
    them; None when the workflow is somebody else's (or that cannot be read)."""
    if not first:
        # The definition stored with the first batch is this call's: nobody else writes the
        # ids of its later steps' jobs. Their sequences are not needed.
        return Stored(0, True)
    try:
        definition = await LimitsStream(conn, app.namespace.stream).last(msgs[0].subject)
    except JsworkerError:
        return None  # a user that may not read the job stream: the conflict stands
    if definition is None or definition.headers.get(START) != msgs[0].headers[START]:
        return None
    # An atomic batch is stored in one run of sequences: its last message follows the first.
    return Stored(definition.seq + len(msgs) - 1, True)


async def _check(app: TaskOwner) -> None:
    """ConfigurationError unless the app runs workflows on a server that has them."""
    if not app.options.workflows:
        raise ConfigurationError(
            f"app {app.name} runs no workflows: declare it with App(..., workflows=True), in the "
            "producers and the workers"
        )
    (await app.connections.connection()).require_version("workflows", WORKFLOWS_SINCE)


def group_flow(
    flow_id: str | None,
    members: Sequence[Signature],
    callback: Signature | None,
    on_error: Signature | None,
    on_failure: OnFailure,
) -> FlowDef:
    """The definition of a group (a chord with ``callback``)."""
    if on_failure not in ("stop", "continue", "ignore"):
        raise ConfigurationError(f"on_failure is 'stop', 'continue' or 'ignore', not {on_failure!r}")
    steps = describe_all(members, "group")
    return FlowDef(
        new_flow_id(flow_id), "group", steps,
        callback.describe(after_result=True) if callback is not None else None,
        on_error.describe(after_result=True, errback=True) if on_error is not None else None,
        on_failure,
    )  # fmt: skip


async def start_linked(
    app: TaskOwner, task: Task[Any, Any], call: Call, link: Signature | None, link_error: Signature | None
) -> Job:
    """Store ``call`` of ``task`` as a workflow of two steps, the job then ``link`` (with
    ``link_error`` for its failure), under the job's own id; the job's receipt."""
    if call.unique:
        raise ConfigurationError(f"task {task.name} is unique: its jobs take no link or link_error")
    if call.due is not None:
        raise ConfigurationError("a delayed job takes no link or link_error")
    first = {
        "task": task.name, "queue": call.queue or task.queue, "args": list(call.args),
        "kwargs": dict(call.kwargs), "immutable": True, "headers": dict(call.headers or {}),
    }  # fmt: skip
    steps = [first] + ([link.describe(after_result=True)] if link is not None else [])
    error = link_error.describe(after_result=True, errback=True) if link_error else None
    flow = FlowDef(call.job_id, "chain", steps, None, error)
    msg = app.producer.message(task, call, spread=False)
    job = OutMessage(msg.subject, msg.body, {**msg.headers, FLOW: flow.id, FLOW_STEP: "0"})
    await _check(app)
    conn = await app.connections.connection()
    try:
        stored = await _publish(
            app, conn, [flow.message(app.namespace, app.serializer, app.options.workflow_ttl), job], True
        )
    except BatchConflict as exc:
        raise EnqueueError(f"job {flow.id} exists already: {exc}", job_id=flow.id) from exc
    except WriteRefused as exc:
        raise EnqueueError(f"cannot enqueue job {flow.id}: {exc}", job_id=flow.id) from exc
    return Job(flow.id, task.name, call.queue or task.queue, stored.seq, False, None, app)
