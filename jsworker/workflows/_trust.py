"""Which jobs are a workflow's own: a workflow advances only from what its own batches stored.

Anyone allowed to enqueue may put the ``Jsw-Flow`` headers on a job, so a job claiming to be a
member or a step counts only when it is where the workflow's writers put it. Every job of a
workflow is stored in an atomic batch, whose messages the server stores at consecutive stream
sequences:

* the start's batch is the definition then the first jobs: the job of a chain's first step, or
  of a group's member ``i`` (within the first batch), is at the definition's sequence plus its
  position in that batch (:meth:`FlowDef.first_position`). The definition read is the first
  message of its subject, which only the start's batch (expecting none there) can store;
* a worker's batch is the state message then the jobs it enqueues (the next step, the
  callbacks): the state names their labels in order, so each job is at the state's sequence
  plus its position, and every later state keeps that sequence (:attr:`FlowState.jobs`).

A delivery's stream sequence is its message's, the same for every redelivery. A job a server
schedule fired (a step set with a countdown) is a new message: it must be a step the start or a
state recorded, under the step's job id. A group's members past the start's first batch go in
batches of their own, which the definition cannot name: they are checked by job id only.

The steps checked are those whose end advances the workflow (a chain's steps, a group's
members); the callbacks' ends advance nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ._definition import FlowDef, FlowState, step_index


class ForgedStep(Exception):
    """A job claimed to be a step of a workflow that did not store it there: the error of its
    dead letter, never raised to a caller."""


async def forged_reason(
    flow: FlowDef,
    def_seq: int,
    step: str,
    job_id: str,
    seq: int,
    fired: bool,
    state: Callable[[], Awaitable[FlowState]],
) -> str | None:
    """Why the job ``job_id`` stored at stream sequence ``seq`` (``fired``: by a server
    schedule) is not step ``step`` of ``flow`` (whose definition is at ``def_seq``), or None
    when it is, or when its end advances nothing. ``state`` reads the workflow's state, which
    only a step the workers enqueued needs."""
    if step in ("cb", "ok", "err"):
        return None
    if step_index(flow, step) is None:
        return f"workflow {flow.id} has no step {step!r}"
    if job_id != flow.job_id(step):
        return f"job {job_id} is not step {step} of workflow {flow.id}, whose job id is {flow.job_id(step)}"
    position = flow.first_position(step)
    if position is not None:
        if fired or seq == def_seq + position:
            return None
        return (
            f"step {step} of workflow {flow.id} was stored with its definition, at sequence "
            f"{def_seq + position}, not {seq}"
        )
    if flow.kind == "group":
        return None if seq > def_seq else f"member {step} stored before workflow {flow.id} began"
    recorded = (await state()).jobs.get(step)
    if recorded is None:
        return f"step {step} of workflow {flow.id} was never enqueued by it"
    if fired or seq == recorded:
        return None
    return f"step {step} of workflow {flow.id} was enqueued at sequence {recorded}, not {seq}"
