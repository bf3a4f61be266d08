"""Workflows on a real server with an in-process worker: chains pass results on, groups are
stored all or none, a chord's callback runs once with every result in order, and failures
stop what they must and run the error callback once."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import nats.js.errors
import pytest

from jsworker import App, EnqueueError, Reject, WorkflowFailed, current_job
from jsworker._errors import WriteRefused
from jsworker.jetstream.atomic import BatchConflict, publish_atomic
from jsworker.jetstream.limits_stream import LimitsStream
from jsworker.testing import NatsServer
from jsworker.workflows import _start, batch, chain, chord, group
from jsworker.workflows._definition import FlowDef, done_subject

from ..support import connected, wait_until_async
from .workers import in_process_worker

pytestmark = pytest.mark.anyio


def make_app(url: str, ran: Counter[str], errors: list[Any]) -> App:
    app = App("wf", url, workflows=True, max_retries=1, retry_backoff=0.05)

    @app.task
    async def add(x: int, y: int) -> int:
        ran[f"add {x} {y}"] += 1
        return x + y

    @app.task
    async def double(x: int) -> int:
        ran[f"double {x}"] += 1
        return 2 * x

    @app.task(store_result=True)
    async def total(values: list[int], extra: int = 0) -> int:
        ran["total"] += 1
        return sum(values) + extra

    @app.task
    async def refuse(x: int) -> int:
        ran[f"refuse {x}"] += 1
        raise Reject(f"no {x}")

    @app.task
    async def flaky(x: int) -> int:
        ran[f"flaky {x} attempt {current_job().attempt}"] += 1
        if current_job().attempt == 1:
            raise ValueError("once")
        return x

    @app.task
    async def report(details: dict[str, Any]) -> None:
        errors.append(details)

    return app


async def test_a_chain_passes_each_result_on_and_returns_the_last(nats_server: NatsServer) -> None:
    ran: Counter[str] = Counter()
    app = make_app(nats_server.url, ran, [])
    add, double = app.tasks["add"], app.tasks["double"]
    async with in_process_worker(app):
        flow = await chain(add.s(1, 2), double.s(), double.s(), add.si(10, 20)).aapply()
        assert await flow.aresult(timeout=30) == 30
        status = await flow.astatus()
    assert status.state == "succeeded" and status.kind == "chain"
    assert ran == {"add 1 2": 1, "double 3": 1, "double 6": 1, "add 10 20": 1}


async def test_a_failed_step_stops_the_chain_and_runs_the_error_callback_once(
    nats_server: NatsServer,
) -> None:
    ran: Counter[str] = Counter()
    errors: list[Any] = []
    app = make_app(nats_server.url, ran, errors)
    add, refuse, double = app.tasks["add"], app.tasks["refuse"], app.tasks["double"]
    async with in_process_worker(app):
        flow = await chain(add.s(1, 1), refuse.s(), double.s(), on_error=app.tasks["report"].s()).aapply()
        with pytest.raises(WorkflowFailed) as failed:
            await flow.aresult(timeout=30)
        await wait_until_async(lambda: errors, timeout=10, message="the error callback")
    assert (failed.value.step, failed.value.state) == ("1", "failed") and "no 2" in failed.value.reason
    assert len(errors) == 1 and "Reject: no 2" in errors[0].pop("traceback")
    assert errors == [
        {
            "flow": flow.id, "step": 1, "job_id": f"{flow.id}-1", "task": "refuse", "reason": "no 2",
            "error_type": "Reject", "error_message": "no 2",
        }
    ]  # fmt: skip
    assert "double 4" not in ran  # the chain stopped


async def test_a_chord_calls_back_once_with_every_result_in_order(nats_server: NatsServer) -> None:
    ran: Counter[str] = Counter()
    app = make_app(nats_server.url, ran, [])
    double, flaky = app.tasks["double"], app.tasks["flaky"]
    members = [double.s(i) for i in range(20)] + [flaky.s(100)]
    async with in_process_worker(app, concurrency=8):
        flow = await chord(members, app.tasks["total"].s(extra=1)).aapply()
        assert await flow.aresult(timeout=60) == sum(2 * i for i in range(20)) + 100 + 1
    assert ran["total"] == 1
    assert ran["flaky 100 attempt 1"] == ran["flaky 100 attempt 2"] == 1  # retried member counted once


async def test_a_group_returns_its_members_results_and_keeps_failures_as_told(
    nats_server: NatsServer,
) -> None:
    ran: Counter[str] = Counter()
    app = make_app(nats_server.url, ran, [])
    double, refuse = app.tasks["double"], app.tasks["refuse"]
    async with in_process_worker(app):
        kept = await group([double.s(1), refuse.s(2), double.s(3)], on_failure="continue").aapply()
        ignored = await group([double.s(1), refuse.s(2), double.s(3)], on_failure="ignore").aapply()
        stopped = await group([double.s(1), refuse.s(2), double.s(3)]).aapply()
        got = await kept.aresult(timeout=30)
        assert got[0] == 2 and got[2] == 6 and got[1]["reason"] == "no 2"
        assert await ignored.aresult(timeout=30) == [2, 6]
        with pytest.raises(WorkflowFailed):
            await stopped.aresult(timeout=30)


async def test_a_chord_whose_member_fails_runs_on_error_not_the_callback(nats_server: NatsServer) -> None:
    ran: Counter[str] = Counter()
    errors: list[Any] = []
    app = make_app(nats_server.url, ran, errors)
    double, refuse = app.tasks["double"], app.tasks["refuse"]
    async with in_process_worker(app):
        flow = (
            await chord([double.s(1), refuse.s(7)], app.tasks["total"].s())
            .on_error(app.tasks["report"].s())
            .aapply()
        )
        with pytest.raises(WorkflowFailed):
            await flow.aresult(timeout=30)
        await wait_until_async(lambda: errors, timeout=10, message="the error callback")
    assert ran["total"] == 0 and len(errors) == 1 and errors[0]["task"] == "refuse"


async def test_starting_the_same_workflow_twice_stores_nothing_the_second_time(
    nats_server: NatsServer,
) -> None:
    app = make_app(nats_server.url, Counter(), [])
    double = app.tasks["double"]
    await app.provision()
    await group([double.s(1), double.s(2)], id="once").aapply()
    with pytest.raises(Exception, match="exists already"):
        await group([double.s(1), double.s(2)], id="once").aapply()
    await app.aclose()


async def test_a_start_whose_answer_was_lost_is_its_own_and_no_other(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server decides a start's batch and the answer is lost (as in a leader change). When
    it was stored, the try again meets the definition stored, this start's own, and the start
    succeeds (a group, a linked job); when it was refused (the id is taken), the try again meets
    another start's definition and the start is refused."""
    ran: Counter[str] = Counter()
    app = make_app(nats_server.url, ran, [])
    double, add = app.tasks["double"], app.tasks["add"]
    publish = publish_atomic
    lose_next = [False]  # set: the answer to the next batch is lost, whatever the server said
    lost: list[int | None] = []  # per answer lost: the sequence stored, None for a refusal

    async def answer_lost(conn: Any, msgs: Any) -> Any:
        lose, lose_next[0] = lose_next[0], False
        try:
            stored = await publish(conn, msgs)
        except BatchConflict:
            if lose:
                lost.append(None)
                raise WriteRefused("no answer: timed out", 0, transient=True) from None
            raise
        if lose:
            lost.append(stored.seq)
            raise WriteRefused("no answer: timed out", 0, transient=True)
        return stored

    monkeypatch.setattr(_start, "publish_atomic", answer_lost)
    async with in_process_worker(app):
        lose_next[0] = True
        flow = await group([double.s(1), double.s(2)], id="lost").aapply()
        lose_next[0] = True
        job = await add.aapply((2, 3), job_id="lost-link", link=double.s())
        assert job.seq == lost[1]
        assert await flow.aresult(timeout=30) == [2, 4]
        await wait_until_async(lambda: ran, until=lambda r: r["double 5"] == 1, timeout=10)
        for taken in (
            lambda: group([double.s(1), double.s(2)], id="lost").aapply(),
            lambda: add.aapply((2, 3), job_id="lost-link", link=double.s()),
        ):
            lose_next[0] = True
            with pytest.raises(EnqueueError, match="exists already"):
                await taken()
    assert lost[2:] == [None, None]
    assert ran == {"double 1": 1, "double 2": 1, "add 2 3": 1, "double 5": 1}
    await app.aclose()


async def test_a_second_definition_published_later_changes_nothing(nats_server: NatsServer) -> None:
    """Producers may publish definitions; the workers read a workflow's first one only."""
    ran: Counter[str] = Counter()
    app = make_app(nats_server.url, ran, [])
    add, double = app.tasks["add"], app.tasks["double"]
    await app.provision()
    flow = await chain(add.s(1, 2), double.s()).aapply()
    forged = FlowDef(flow.id, "chain", [add.s(1, 2).describe(False), add.si(100, 100).describe(True)])
    conn = await app.connections.connection()
    await conn.nc.publish(f"jsw.wf.flow.def.{flow.id}", forged.encode(app.serializer))
    await conn.nc.flush()
    await app.aclose()
    async with in_process_worker(app):
        assert await flow.aresult(timeout=30) == 6
    assert "add 100 100" not in ran


async def test_link_runs_after_a_job_and_link_error_after_its_failure(nats_server: NatsServer) -> None:
    ran: Counter[str] = Counter()
    errors: list[Any] = []
    app = make_app(nats_server.url, ran, errors)
    add, double, flaky = app.tasks["add"], app.tasks["double"], app.tasks["flaky"]
    report, refuse = app.tasks["report"], app.tasks["refuse"]
    async with in_process_worker(app):
        job = await add.aapply((2, 3), job_id="linked-1", link=double.s(), link_error=report.s())
        assert job.id == "linked-1"
        assert await app.workflow(job.id).aresult(timeout=30) == 10
        retried = await flaky.aapply((7,), link=double.s())  # linked once, after its last attempt
        assert await app.workflow(retried.id).aresult(timeout=30) == 14
        failed = await refuse.aapply((9,), link=double.s(), link_error=report.s())
        with pytest.raises(WorkflowFailed):
            await app.workflow(failed.id).aresult(timeout=30)
        await wait_until_async(lambda: errors, timeout=10, message="link_error to run")
    assert ran["double 5"] == 1 and ran["double 7"] == 1 and "double 9" not in ran
    assert len(errors) == 1 and "Reject: no 9" in errors[0].pop("traceback")
    assert errors == [
        {
            "flow": failed.id, "step": 0, "job_id": failed.id, "task": "refuse", "reason": "no 9",
            "error_type": "Reject", "error_message": "no 9",
        }
    ]  # fmt: skip


async def test_a_step_whose_result_cannot_be_sent_on_ends_the_chain_with_that_reason(
    nats_server: NatsServer,
) -> None:
    app = make_app(nats_server.url, Counter(), [])

    @app.task
    async def opaque() -> object:
        return object()

    async with in_process_worker(app):
        flow = await chain(opaque.s(), app.tasks["double"].s()).aapply()
        with pytest.raises(WorkflowFailed) as failed:
            await flow.aresult(timeout=30)
    assert failed.value.step == "0" and "cannot be sent on" in failed.value.reason


async def test_a_chord_of_1000_members_takes_two_batches_and_calls_back_once(nats_server: NatsServer) -> None:
    """Past the server's batch of 1,000 messages the members go in batches of their own."""
    ran: Counter[str] = Counter()
    app = make_app(nats_server.url, ran, [])
    double = app.tasks["double"]
    async with in_process_worker(app, concurrency=50):
        flow = await chord([double.s(i) for i in range(1000)], app.tasks["total"].s()).aapply()
        assert await flow.aresult(timeout=120) == 2 * sum(range(1000))
        status = await flow.astatus()
    assert ran["total"] == 1 and status.ended_members == 1000


async def test_a_batch_calls_on_complete_always_and_on_success_only_without_failures(
    nats_server: NatsServer,
) -> None:
    ran: Counter[str] = Counter()
    completed: list[list[Any]] = []
    app = make_app(nats_server.url, ran, [])
    double, refuse = app.tasks["double"], app.tasks["refuse"]

    @app.task
    async def complete(values: list[Any]) -> None:
        completed.append(values)

    @app.task
    async def celebrate(values: list[Any]) -> None:
        ran[f"celebrate {values}"] += 1

    on_complete, on_success = complete.s(), celebrate.s()
    async with in_process_worker(app):
        await batch([double.s(1), double.s(2)], on_complete=on_complete, on_success=on_success).aapply()
        await batch([double.s(3), refuse.s(4)], on_complete=on_complete, on_success=on_success).aapply()
        await wait_until_async(lambda: len(completed) == 2, timeout=30, message="both on_complete callbacks")
        await wait_until_async(
            lambda: ran["celebrate [2, 4]"] == 1, timeout=30, message="the clean one's on_success"
        )
    assert [2, 4] in completed
    mixed = next(v for v in completed if v != [2, 4])
    assert mixed[0] == 6 and mixed[1]["reason"] == "no 4"  # the failure's details in its place
    assert [k for k in ran if k.startswith("celebrate")] == ["celebrate [2, 4]"]  # none for the mixed one


async def test_a_step_set_with_countdown_and_job_id_waits_and_keeps_its_id(nats_server: NatsServer) -> None:
    ran: Counter[str] = Counter()
    app = make_app(nats_server.url, ran, [])
    add, double = app.tasks["add"], app.tasks["double"]
    async with in_process_worker(app):
        began = time.monotonic()
        flow = await chain(add.s(1, 1), double.s().set(countdown=1.0, job_id="doubled-later")).aapply()
        assert await flow.aresult(timeout=30) == 4
        assert time.monotonic() - began >= 1.0  # the server held the second step back
        status = await flow.astatus()
        later = await app.job("doubled-later").astatus()
    assert [s.id for s in status.steps if s is not None] == [flow.id, "doubled-later"]
    assert later.state.value in ("succeeded", "unknown")  # a first success keeps no record
    assert ran["double 2"] == 1


async def test_members_that_end_while_the_tally_is_down_spend_no_attempt(nats_server: NatsServer) -> None:
    """The tally stream gone while a chord's members end (what a leader election looks like to
    them: no responders): each member keeps trying to count itself while it holds its job, and
    once the stream is back the callback runs once with every result; no member ran twice or
    counted a failure."""
    ran: Counter[str] = Counter()
    app = make_app(nats_server.url, ran, [])
    add, total = app.tasks["add"], app.tasks["total"]
    async with in_process_worker(app):
        await app.provision()
        async with connected(nats_server.url) as nc:
            js = nc.jetstream()
            await js.delete_stream(app.namespace.tally_stream)
            flow = await chord([add.s(1, 2), add.s(3, 4)], total.s()).aapply()
            # Both results stored: the members are counting themselves, with no tally to count on.
            done = LimitsStream(await app.connections.connection(), app.namespace.stream)
            await wait_until_async(
                lambda: done.count(done_subject(app.namespace, flow.id)), until=lambda n: n == 2, timeout=10
            )
            await app.provision()  # the stream back, as a new leader would be
            assert await flow.aresult(timeout=30) == 10
    assert ran == Counter({"add 1 2": 1, "add 3 4": 1, "total": 1})


async def test_the_member_that_makes_the_tally_whole_waits_for_the_results_to_be_counted(
    nats_server: NatsServer,
) -> None:
    """The tally says every member counted (each counts after storing its result), while the
    count of results stored is still one short: what a job stream's leader elected a moment
    ago answers while it applies what was stored before. The member that made the tally whole
    counts the results again until they are all there, and starts the callback; before, it
    read one count, went its way, and no member ever started the callback."""
    ran: Counter[str] = Counter()
    app = make_app(nats_server.url, ran, [])
    double, total = app.tasks["double"], app.tasks["total"]
    gate = asyncio.Event()

    @app.task
    async def last(x: int) -> int:
        await gate.wait()
        return x

    async with in_process_worker(app), connected(nats_server.url) as nc:
        js = nc.jetstream()
        flow = await chord([double.s(1), last.s(5)], total.s()).aapply()
        first = done_subject(app.namespace, flow.id, 0)
        stored = await wait_until_async(lambda: _last(js, app.namespace.stream, first), timeout=10)
        # The first result, counted, goes from the stream for a moment (the lagging count).
        await js.delete_msg(app.namespace.stream, stored.seq)
        gate.set()
        await wait_until_async(
            lambda: _last(js, app.namespace.tally_stream, app.namespace.tally_subject(flow.id)),
            until=lambda m: m is not None and b'"2"' in m.data,
            timeout=10,
            message="the tally made whole",
        )
        await js.publish(first, stored.data, headers=stored.headers)  # and is there again
        assert await flow.aresult(timeout=30) == 2 + 5
    assert ran["total"] == 1


async def _last(js: Any, stream: str, subject: str) -> Any:
    """The last message on ``subject`` of ``stream``, or None."""
    try:
        return await js.get_last_msg(stream, subject)
    except nats.js.errors.NotFoundError:
        return None


async def test_a_cancelled_workflow_runs_no_further_step_and_no_callback(nats_server: NatsServer) -> None:
    """A chain cancelled while its first step runs: that step is cancelled, no later step is
    enqueued. A chord cancelled while its members run (members whose failures its callback
    takes): they are cancelled, its callback never runs, nor an error callback. Both read as
    cancelled; a second cancel changes nothing."""
    gate = asyncio.Event()
    ran: Counter[str] = Counter()
    errors: list[Any] = []
    app = make_app(nats_server.url, ran, errors)

    @app.task
    async def wait(x: int) -> int:
        ran[f"wait {x}"] += 1
        await gate.wait()
        return x

    async with in_process_worker(app):
        flow = await chain(wait.s(1), app.tasks["double"].s(), on_error=app.tasks["report"].s()).aapply()
        # Members whose failures the callback takes: cancelled one by one, they would call it.
        members = group([wait.s(2), wait.s(3)], on_failure="continue")
        held = await chord(members, app.tasks["total"].s()).aapply()
        await wait_until_async(lambda: len(ran) == 3, timeout=10, message="the three waits to start")
        assert await flow.acancel() and await held.acancel()
        assert not await flow.acancel()  # ended already
        for cancelled in (flow, held):
            with pytest.raises(WorkflowFailed, match="cancelled"):
                await cancelled.aresult(timeout=10)
        status = await flow.astatus()
        assert status.state == "cancelled" and status.steps[1] is None
        await wait_until_async(
            held.astatus,
            until=lambda s: all(step is not None and step.state == "cancelled" for step in s.steps[:2]),
            timeout=10,
            message="the chord's members cancelled",
        )
    assert "double 1" not in ran and ran["total"] == 0 and errors == []
