"""App ``perm`` with a final-state handler, run by users that hold only the permissions
``jsworker permissions perm`` prints: its handler appends ``final <job id> <state>`` to the
file ``JSW_TEST_RECORD`` names."""

from __future__ import annotations

from jsworker import App, JobStatus
from jsworker.testing import append_record

# The streams of apps/perm_app.py (events on): only the handler's consumer is new.
app = App("perm", events=True, final_states=True)


@app.on_final_state("table")
def table(status: JobStatus) -> None:
    append_record(f"final {status.id} {status.state.value}\n")


@app.task
async def add(a: int, b: int) -> int:
    return a + b
