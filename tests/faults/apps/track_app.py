"""A task-tracking table fed two ways, as a port builds one: by the worker's ``on_settled``
hook and by a final-state handler (``@app.on_final_state``). Each appends a line to the file
``JSW_TEST_RECORD`` names::

    settled <job id> <state>
    final <job id> <state>

and every run records ``start`` and ``done`` as the other fault apps' do. A ``work`` run may be
held on a gate (``life_app.held``) until the test opens it, so faults land on jobs in flight.
"""

from __future__ import annotations

from life_app import held

from jsworker import App, JobContext, JobStatus, Middleware, Reject, Settled
from jsworker.testing import append_record
from jsworker.testing import record_execution as record


class Tracking(Middleware):
    """The in-process hook: heard once at most, by the worker that settled the delivery."""

    async def on_settled(self, job: JobContext, settled: Settled) -> None:
        append_record(f"settled {job.id} {settled.state}\n")


# ack_wait=2: a job held by a worker that died comes back within seconds; no retries, so a
# failure is final at once.
app = App("trk", ack_wait=2, max_retries=0, final_states=True, middleware=[Tracking()])


@app.on_final_state("table")
def table(status: JobStatus) -> None:
    """The durable way: each job's final state, at least once, wherever it ended."""
    append_record(f"final {status.id} {status.state.value}\n")


@app.task
async def work(n: int, gate: str | None) -> int:
    """A job that runs until ``gate`` opens (at once without one): the test opens each gate
    after the fault it holds jobs in flight for."""
    record("start")
    if gate is not None:
        await held(gate)
    record("done")
    return n


@app.task
async def fail(n: int) -> None:
    """A job that fails for good."""
    record("done")
    raise Reject(f"refused {n}")
