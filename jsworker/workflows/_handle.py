"""A started workflow: its status and its result."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._core.job_status import JobState
from .._errors import JobNotFound, JsworkerError, WorkflowFailed
from ..jetstream.limits_stream import LimitsStream
from ._advance import Continuations
from ._definition import FlowDef, FlowState, def_subject, done_subject, read_result, read_state, step_id

if TYPE_CHECKING:
    from .._core.job_status import JobStatus
    from .._enqueue.task import TaskOwner

# A step's job in one of these states has nothing left to cancel.
_OVER = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.EXPIRED, JobState.UNKNOWN}
)

# Waiting for a workflow's end reads its state, first often, then every half second at most.
_FIRST_LOOK, _LONGEST_LOOK = 0.01, 0.5


@dataclass(frozen=True)
class WorkflowStatus:
    """Where a workflow is: ``state`` is ``running``, ``succeeded``, ``failed``, ``cancelled``
    or ``expired`` (``at``: the step that ended it, ``reason``: why); ``steps`` the status of
    each step's job (a chain's steps not enqueued yet are ``None``); ``ended_members`` how
    many of a group's members have stored their result (a chain's last step, once it did)."""

    id: str
    kind: str
    state: str
    at: str | None
    reason: str
    steps: list[JobStatus | None]
    ended_members: int


class Workflow:
    """Handle on a started chain, group or chord (``app.workflow(id)`` for one by id).

    Reading it needs a user that may read the job stream (an operator, or a server without
    permissions).
    """

    def __init__(self, app: TaskOwner, flow_id: str) -> None:
        self.app = app
        self.id = flow_id

    def __repr__(self) -> str:
        return f"<Workflow {self.id}>"

    async def _stream(self) -> LimitsStream:
        return LimitsStream(await self.app.connections.connection(), self.app.namespace.stream)

    async def _definition(self) -> FlowDef:
        stream = await self._stream()
        found = await stream.next(def_subject(self.app.namespace, self.id), 1)
        if found is None or not found.body:
            raise JobNotFound(f"no workflow {self.id} (or it expired)")
        return FlowDef.decode(self.app.serializer, found.body)

    async def _state(self) -> FlowState:
        return await read_state(await self._stream(), self.app.namespace, self.id)

    async def astatus(self) -> WorkflowStatus:
        """The workflow's status now."""
        flow, state = await self._definition(), await self._state()
        kind = "" if flow.kind == "chain" else "m"
        ids = [d.get("job_id") or step_id(self.id, f"{kind}{i}") for i, d in enumerate(flow.steps)]
        known = state.step + 1 if flow.kind == "chain" else len(flow.steps)
        if flow.callback is not None:
            ids.append(flow.callback.get("job_id") or step_id(self.id, "cb"))
            known += state.at == "cb"
        # Read together, a few at a time: a group of 1,000 members is 1,000 questions.
        limit = asyncio.Semaphore(32)

        async def read(job_id: str) -> JobStatus:
            async with limit:
                return await self._step_status(job_id)

        statuses: list[JobStatus | None] = list(await asyncio.gather(*(read(i) for i in ids[:known])))
        statuses += [None] * (len(ids) - known)
        ended = await (await self._stream()).count(done_subject(self.app.namespace, self.id))
        return WorkflowStatus(
            self.id, flow.kind, state.ended or "running", state.at, state.reason, statuses, ended
        )

    async def _step_status(self, job_id: str) -> JobStatus:
        """The status of the step whose job is ``job_id`` (an admin reads it directly)."""
        return await self.app.lifecycle.status(job_id)

    async def acancel(self) -> bool:
        """Cancel the whole workflow: its state says ``cancelled``, so no further step is
        enqueued and no callback runs (the error callback neither: a cancel is no failure),
        then every step whose job is scheduled, queued, running or retrying is cancelled (a
        running async step within moments). True when it was running; False when it had
        ended (its jobs are left alone). :class:`~jsworker.JobNotFound` for no such workflow.
        Writing its state needs a user that may advance workflows (an operator, or a server
        without permissions)."""
        conn = await self.app.connections.connection()
        ended = await Continuations(self.app, conn).cancel(self.id, "the workflow was cancelled")
        if ended:
            # Read after the state write: a step enqueued by the last advance is among them.
            for step in (await self.astatus()).steps:
                if step is not None and step.state not in _OVER:
                    await self.app.lifecycle.cancel(step.id)
        return ended

    def cancel(self) -> bool:
        """Sync form of :meth:`acancel`."""
        return self.app.bridge.run_sync(self.acancel)

    def status(self) -> WorkflowStatus:
        """Sync form of :meth:`astatus`."""
        return self.app.bridge.run_sync(self.astatus)

    async def aresult(self, timeout: float | None = None) -> Any:
        """Wait for the workflow to end and return its result: a chain's last step's value, a
        group's members' values in order (an error's details in place of a member's under
        ``on_failure="continue"``, none under ``"ignore"``), a chord's callback's value (its
        task must keep results). :class:`~jsworker.WorkflowFailed` when it ended otherwise,
        ``TimeoutError`` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        flow = await self._definition()
        pause = _FIRST_LOOK
        while (state := await self._state()).ended is None:
            if deadline is not None and time.monotonic() + pause > deadline:
                raise TimeoutError(f"workflow {self.id} did not end within {timeout}s")
            await asyncio.sleep(pause)
            pause = min(_LONGEST_LOOK, pause * 2)
        if state.ended != "succeeded":
            raise WorkflowFailed(self.id, state.at, state.ended, state.reason)
        if flow.callback is not None:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            callback = flow.callback.get("job_id") or step_id(self.id, "cb")
            return await self.app.lifecycle.result(callback, None, left)
        stream = await self._stream()
        indexes = [len(flow.steps) - 1] if flow.kind == "chain" else range(len(flow.steps))
        values = []
        for i in indexes:
            found = await read_result(stream, self.app.namespace, self.id, i)
            if found is None or not found.body:
                raise JsworkerError(f"workflow {self.id}: the result of step {i} is gone")
            kept = self.app.serializer.loads(found.body)
            if "ok" in kept:
                # As the step's task's return annotation says (see jsworker._enqueue.results).
                task = self.app.tasks.get(flow.steps[i]["task"])
                values.append(kept["ok"] if task is None else task.given_back(kept["ok"]))
            elif "error" in kept:
                values.append(kept["error"])
        return values[0] if flow.kind == "chain" else values

    def result(self, timeout: float | None = None) -> Any:
        """Sync form of :meth:`aresult`."""
        return self.app.bridge.run_sync(self.aresult, timeout)
