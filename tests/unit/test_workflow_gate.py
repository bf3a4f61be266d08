"""The worker's check of a workflow step before it runs
(:meth:`jsworker._runtime.interceptors.workflows.Workflows.admit`):
a server that does not answer (the job stream electing its leader) is no failure of the task."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any, cast

import pytest

from jsworker._errors import LimitsStreamError
from jsworker._runtime.execution import JobRun
from jsworker._runtime.interceptors import workflows as runtime_flows
from jsworker._runtime.outcomes import OutcomeKind
from jsworker.workflows._advance import Continuations
from jsworker.workflows._definition import FLOW

pytestmark = pytest.mark.anyio


class Flows:
    """Answers ``forged`` with each of ``answers`` in turn (an exception is raised)."""

    def __init__(self, *answers: str | Exception | None) -> None:
        self.answers = list(answers)
        self.asked = 0

    async def forged(self, headers: Mapping[str, str], job_id: str, seq: int, fired: bool) -> str | None:
        answer = self.answers[min(self.asked, len(self.answers) - 1)]
        self.asked += 1
        if isinstance(answer, Exception):
            raise answer
        return answer


def job() -> JobRun:
    delivery = SimpleNamespace(headers={FLOW: "f"}, stream_seq=7)
    return cast(JobRun, SimpleNamespace(delivery=delivery, job_id="f-m0", fired=None))


async def gate(flows: Flows) -> Any:
    checked = runtime_flows.Workflows(cast(Continuations, flows)).admit(job())
    assert checked is not None
    return await checked


async def test_a_step_is_checked_again_while_the_server_elects_a_leader() -> None:
    outage = LimitsStreamError("cannot read: timeout", transient=True)
    flows = Flows(outage, outage, None)
    assert await gate(flows) is None  # the step runs
    assert flows.asked == 3


async def test_a_lasting_outage_gives_the_step_back_without_spending_an_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runtime_flows, "_PATIENCE", 0.3)
    outcome = await gate(Flows(LimitsStreamError("cannot read: timeout", transient=True)))
    assert outcome.kind is OutcomeKind.SNOOZED
    assert "could not check its workflow" in outcome.reason


async def test_a_refusal_fails_the_step_and_a_forgery_is_bad_input() -> None:
    refused = await gate(Flows(LimitsStreamError("cannot read: not permitted", transient=False)))
    assert refused.kind is OutcomeKind.FAILED
    forged = await gate(Flows("not the workflow's"))
    assert forged.kind is OutcomeKind.BAD_INPUT
