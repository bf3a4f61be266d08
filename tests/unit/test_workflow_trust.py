"""The rule that tells a workflow's own steps from forgeries (:mod:`jsworker.workflows._trust`),
on definitions and states as the start and the workers store them."""

from __future__ import annotations

import asyncio
import json

from jsworker.workflows._definition import FlowDef, FlowState
from jsworker.workflows._trust import forged_reason

STEP = {"task": "t", "queue": "default", "args": [], "kwargs": {}}
CHAIN = FlowDef("c", "chain", [STEP, STEP, STEP])
GROUP = FlowDef("g", "group", [STEP] * 1200, callback=STEP)


def check(
    flow: FlowDef, step: str, job_id: str, seq: int, state: FlowState, fired: bool = False
) -> str | None:
    async def read() -> FlowState:
        return state

    return asyncio.run(forged_reason(flow, 10, step, job_id, seq, fired, read))


def stored(seq: int, **raw: object) -> FlowState:
    return FlowState.decode(seq, json.dumps(raw).encode())


def test_first_jobs_are_genuine_only_at_their_place_in_the_start_batch() -> None:
    assert check(CHAIN, "0", "c", 11, FlowState()) is None
    assert check(GROUP, "m3", "g-m3", 14, FlowState()) is None
    assert check(GROUP, "m998", "g-m998", 1009, FlowState()) is None
    assert "at sequence 14, not 20" in (check(GROUP, "m3", "g-m3", 20, FlowState()) or "")
    assert "job id" in (check(GROUP, "m3", "other", 14, FlowState()) or "")
    assert "no step" in (check(GROUP, "m1200", "g-m1200", 1211, FlowState()) or "")
    assert check(GROUP, "m3", "g-m3", 50, FlowState(), fired=True) is None  # a delayed member


def test_a_step_a_worker_enqueued_is_genuine_on_every_delivery() -> None:
    # Step 1 went in the batch of the state at 40 (right after it), step 2 in that at 55.
    at_step_1 = stored(40, step=1, wrote=["1"])
    assert at_step_1.jobs == {"1": 41}
    assert check(CHAIN, "1", "c-1", 41, at_step_1) is None
    assert "never enqueued" in (check(CHAIN, "2", "c-2", 42, at_step_1) or "")
    assert "at sequence 41, not 45" in (check(CHAIN, "1", "c-1", 45, at_step_1) or "")
    # Later writes keep what the earlier ones enqueued: step 1 redelivered after its end.
    at_step_2 = stored(55, step=2, jobs=at_step_1.jobs, wrote=["2"])
    ended = stored(60, step=2, ended="succeeded", jobs=at_step_2.jobs, wrote=[""])
    assert ended.jobs == {"1": 41, "2": 56}
    assert check(CHAIN, "1", "c-1", 41, ended) is None and check(CHAIN, "2", "c-2", 56, ended) is None


def test_callbacks_advance_nothing_and_are_not_checked() -> None:
    assert check(GROUP, "cb", "anything", 1, FlowState()) is None
