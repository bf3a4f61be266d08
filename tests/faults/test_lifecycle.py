"""A job's lifecycle under faults: a unique job's key through a worker SIGKILL, a cancel while
the worker running the job is down or stopping, ``max_running`` across worker processes, a
result or an error larger than the server's ``max_payload``, and cancels reaching each of
three workers.

The workers run ``life_app`` (``apps/life_app.py``). Its held jobs wait for a gate file the
test opens, so whether a job can finish is decided by the test, never by a duration.
"""

from __future__ import annotations

import functools
import json
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from jsworker import JobCancelled, JobFailed, JobState
from jsworker._lifecycle.lookup import UNHELD
from jsworker._server import ServerNotFoundError, find_nats_server
from jsworker.testing import Execution, NatsServer

from ..support import consumer_state, need, wait_consumer_settled, wait_until
from .harness import (
    Records,
    WorkerProc,
    Workers,
    app_module,
    dead_letters,
    open_gate,
    request_json,
    wait_stream_empty,
)

pytestmark = pytest.mark.faults

MODULE = "life_app"
STREAM = "JSW_LCY"
DLQ_STREAM = "JSW_LCY_DLQ"
# The max_payload of the small server (the default is 1 MiB): results and errors over it are
# cheap to make, and the worker's own limit (1 KiB of room for the record) is easy to reach.
SMALL_PAYLOAD = 64 * 1024


@pytest.fixture
def life_app() -> Iterator[ModuleType]:
    """The lifecycle app module, as producers in this process use it; settings restored after."""
    yield from app_module(MODULE)


@pytest.fixture
def small_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A nats-server whose max_payload is :data:`SMALL_PAYLOAD` (set in a config file: there
    is no flag for it)."""
    try:
        binary = find_nats_server()
    except ServerNotFoundError as exc:
        need(False, str(exc))
    conf = tmp_path / "small.conf"
    conf.write_text(f"max_payload: {SMALL_PAYLOAD}\n")
    server = NatsServer(binary=binary, log_file=tmp_path / "nats-server.log", extra_args=["-c", str(conf)])
    server.start()
    try:
        yield server
    finally:
        server.stop()


# -- helpers ------------------------------------------------------------------------------


def runs(records: Records, event: str, job_id: str, pid: int | None = None) -> list[Execution]:
    """``event`` lines of ``job_id`` (recorded by process ``pid`` when given)."""
    return [r for r in records.of(event) if r.job_id == job_id and (pid is None or r.pid == pid)]


def report(test: str, **figures: Any) -> None:
    print(json.dumps({"test": test, **figures}))  # noqa: T201 - the figures this suite reports (pytest -s)


def start(workers: Workers, url: str, name: str, *args: str) -> WorkerProc:
    worker = workers.start(url, name, *args, module=MODULE)
    worker.wait_started()
    return worker


def job_messages(url: str, job_id: str) -> int:
    """Messages of ``job_id`` in the job stream now (its subject ends in the id)."""
    info = request_json(url, f"$JS.API.STREAM.INFO.{STREAM}", {"subjects_filter": f"jsw.lcy.q.*.*.{job_id}"})
    return sum(int(n) for n in ((info.get("state") or {}).get("subjects") or {}).values())


# -- unique jobs --------------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_unique_key_held_through_sigkill_until_the_redelivered_run_ends(
    nats_server: NatsServer, life_app: ModuleType, workers: Workers, records: Records
) -> None:
    """A unique job runs on worker A, which is SIGKILLed mid-run. While A is dead, and while
    worker B runs the redelivered job, an enqueue with the same key is a duplicate naming it;
    once B has finished it (and acked it), the same key is accepted as a new job, which runs."""
    url = nats_server.url
    life_app.app.servers = [url]
    task = life_app.unique_hold
    a = start(workers, url, "a", "-c", "5")
    first = task.delay("k")
    assert not first.duplicate
    wait_until(lambda: runs(records, "start", first.id, a.pid), timeout=15, message="A to start the job")
    running = task.delay("k")
    assert running.duplicate and (running.id, running.seq) == (first.id, first.seq)

    killed = time.monotonic()
    a.kill()
    assert a.proc.returncode == -9
    while_dead = task.delay("k")
    assert while_dead.duplicate and (while_dead.id, while_dead.seq) == (first.id, first.seq)
    # Delivered to A, never settled, and held by no live worker: queued, saying why.
    held = life_app.app.status(first.id)
    assert (held.state, held.reason) == (JobState.QUEUED, UNHELD)

    b = start(workers, url, "b", "-c", "5")
    redelivered = wait_until(
        lambda: runs(records, "start", first.id, b.pid),
        timeout=20,
        message="B to start the job after A's ack_wait ran out",
    )[0]
    assert redelivered.attempt >= 2
    on_b = task.delay("k")
    assert on_b.duplicate and on_b.seq == first.seq
    open_gate(url, workers, "k")
    assert first.result(timeout=15) == "k"
    # The key is released when the message leaves the stream: B acks it just after storing the
    # result that the line above received.
    wait_until(lambda: job_messages(url, first.id), until=lambda n: n == 0, timeout=15,
               message="B's ack to remove the job's message")  # fmt: skip
    released = time.monotonic()
    fresh = task.delay("k")
    assert not fresh.duplicate and fresh.id == first.id and fresh.seq > first.seq
    assert fresh.result(timeout=15) == "k"
    assert len(runs(records, "done", first.id)) == 2  # B's run of the first job, then the new one
    assert runs(records, "done", first.id, a.pid) == []
    report(
        "unique_key_through_sigkill",
        redelivered_after_s=round(redelivered.at - killed, 3),
        redelivered_attempt=redelivered.attempt,
        key_released_after_kill_s=round(released - killed, 3),
    )


@pytest.mark.timeout(60)
def test_unique_job_enqueued_again_reports_its_own_status(
    nats_server: NatsServer, life_app: ModuleType, workers: Workers, records: Records
) -> None:
    """A unique job that keeps its result finishes; the same key is enqueued again and that new
    run is held running. Its status is ``running`` (the new run's), not the ``succeeded`` of
    the run before, which is still in the jobs bucket under the same job id."""
    url = nats_server.url
    life_app.app.servers = [url]
    task = life_app.unique_hold
    start(workers, url, "w", "-c", "5")
    gate = workers.record.parent / "gate-again"
    open_gate(url, workers, "again")
    first = task.delay("again")
    assert first.result(timeout=15) == "again"
    wait_stream_empty(url, 15, STREAM)
    gate.unlink()  # the next run is held
    second = task.delay("again")
    assert not second.duplicate and second.seq > first.seq
    wait_until(
        lambda: len(runs(records, "start", second.id)) == 2, timeout=15, message="the new run to start"
    )
    status = life_app.app.status(second.id)
    open_gate(url, workers, "again")
    assert second.result(timeout=15) == "again"
    report("unique_rerun_status", status_while_new_run_held=status.state.value)
    assert status.state is JobState.RUNNING, (
        f"status of a new run of {second.id} (seq {second.seq}) read {status.state.value}: the record of "
        f"the previous run (seq {first.seq})"
    )


# -- cancel while the worker is down ------------------------------------------------------


@pytest.mark.timeout(90)
@pytest.mark.parametrize("stop", ["sigkill", "sigterm"])
def test_cancel_running_job_while_its_worker_restarts(
    nats_server: NatsServer, life_app: ModuleType, workers: Workers, records: Records, stop: str
) -> None:
    """A job runs on worker A. ``sigkill``: A is SIGKILLed (with a second job, the witness,
    running too) and the job is cancelled while A is dead. ``sigterm``: A gets SIGTERM with a
    long grace period and the job is cancelled while A waits for it; A stops it and exits.
    Then worker B starts, with the job's gate open, so any run of it would finish at once.
    It never runs again: B runs the witness, which the server redelivered after ack_wait (and
    delivered to A after the cancelled job), and a job enqueued after the cancel; the consumer
    settles with nothing left to hand out. Its status is ``cancelled``."""
    url = nats_server.url
    app, hold = life_app.app, life_app.hold
    app.servers = [url]
    a = start(workers, url, "a", "-c", "5", "--grace", "60")
    target = hold.delay("target")
    wait_until(lambda: runs(records, "start", target.id, a.pid), timeout=15, message="A to start the job")
    witness = None
    figures: dict[str, Any] = {}
    if stop == "sigkill":
        # Delivered to A after the target: its ack deadline comes no earlier than the target's,
        # so its redelivery to B shows that the target's would have happened too.
        witness = hold.delay("witness")
        wait_until(
            lambda: runs(records, "start", witness.id, a.pid), timeout=15, message="A to start the witness"
        )
        a.kill()
        assert app.status(target.id).reason == UNHELD  # handed out, its worker gone
        began = time.monotonic()
        assert app.cancel(target.id)
        figures["cancel_s"] = round(time.monotonic() - began, 3)
    else:
        a.proc.send_signal(signal.SIGTERM)
        # The grace period is under way, and cannot end by itself: the job waits for its gate.
        a.wait_logged("worker.stopping")
        began = time.monotonic()
        assert app.cancel(target.id)
        figures["cancel_s"] = round(time.monotonic() - began, 3)
        assert a.alive(), "A exited before the cancel: the job was not cancelled in the grace period"
        stopped = wait_until(
            lambda: runs(records, "stopped", target.id, a.pid), timeout=10, message="A to stop the job"
        )[0]
        figures["stopped_after_cancel_s"] = round(stopped.at - began, 3)
        # With no job left A ends its grace period at once (it would otherwise wait 60 s).
        wait_until(lambda: not a.alive(), timeout=30, message="A to exit once its last job was cancelled")
        figures["a_exited_after_cancel_s"] = round(time.monotonic() - began, 3)
        assert a.proc.returncode == 0, a.tail()
    open_gate(url, workers, "target")
    open_gate(url, workers, "witness")
    open_gate(url, workers, "after")

    b = start(workers, url, "b", "-c", "5")
    if witness is not None:
        redone = wait_until(
            lambda: runs(records, "done", witness.id, b.pid), timeout=20, message="B to run the witness"
        )[0]
        assert redone.attempt >= 2
        assert witness.result(timeout=10) == "witness"
    after = hold.delay("after")
    assert after.result(timeout=15) == "after"
    assert runs(records, "done", after.id, b.pid)
    settled = wait_consumer_settled(url, STREAM, "default", timeout=20)

    # Target, witness (twice) and the later job; or target and the later job: the server never
    # handed the cancelled job out again.
    assert settled.delivered == (4 if witness is not None else 2), settled
    assert runs(records, "done", target.id) == [], "the cancelled job ran to completion"
    assert [r.pid for r in runs(records, "start", target.id)] == [a.pid]
    assert job_messages(url, target.id) == 0
    status = app.status(target.id)
    assert status.state is JobState.CANCELLED, status
    with pytest.raises(JobCancelled):
        target.result(timeout=5)
    assert b.alive(), b.tail()
    report(f"cancel_while_worker_restarts[{stop}]", delivered=settled.delivered, **figures)


# -- max_running --------------------------------------------------------------------------


def max_overlap(spans: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (one ending when another begins: not overlapping)."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


def spans_of(record: Path) -> dict[str, list[tuple[float, float]]]:
    """The ``span`` lines of ``life_app.capped``, by job id."""
    found: dict[str, list[tuple[float, float]]] = {}
    for line in record.read_text().splitlines():
        parts = line.split()
        if len(parts) == 7 and parts[0] == "span":
            found.setdefault(parts[1], []).append((float(parts[5]), float(parts[6])))
    return found


@pytest.mark.timeout(120)
def test_max_running_caps_jobs_across_worker_processes(
    nats_server: NatsServer, life_app: ModuleType, workers: Workers, records: Records
) -> None:
    """Queue ``capped`` declares max_running=4. Three worker processes with -c 50 each run 200
    jobs of 0.2 s: every job runs once, and at no instant do more than 4 run (from each run's
    start and end times)."""
    url = nats_server.url
    life_app.app.servers = [url]
    limit = life_app.MAX_RUNNING
    procs = [workers.start(url, f"w{i}", "-c", "50", "-Q", "capped", module=MODULE) for i in range(3)]
    for proc in procs:
        proc.wait_started()
    config = request_json(url, f"$JS.API.CONSUMER.INFO.{STREAM}.capped")["config"]
    assert config["max_ack_pending"] == limit

    jobs = life_app.capped.delay_many([(i, 0.2) for i in range(200)])
    ids = {j.id for j in jobs}
    assert len(ids) == 200
    wait_until(lambda: records.done_ids("capped") >= ids, timeout=90, message="all 200 jobs to finish")
    wait_stream_empty(url, 30, STREAM)
    settled = wait_consumer_settled(url, STREAM, "capped")

    spans = spans_of(workers.record)
    all_spans = [span for found in spans.values() for span in found]
    overlap = max_overlap(all_spans)
    first, last = min(s for s, _ in all_spans), max(e for _, e in all_spans)
    by_worker = Counter(r.pid for r in records.of("done", "capped"))
    report(
        "max_running",
        jobs=len(ids),
        max_running=limit,
        max_overlap=overlap,
        total_s=round(last - first, 3),
        floor_s=round(len(ids) * 0.2 / limit, 3),
        delivered=settled.delivered,
        jobs_per_worker=sorted(by_worker.values()),
    )
    assert set(spans) == ids
    assert all(len(found) == 1 for found in spans.values())
    assert set(records.counts("start", "capped").values()) == {1}
    assert set(records.counts("done", "capped").values()) == {1}
    assert settled.delivered == len(ids)  # no redelivery either
    assert overlap <= limit
    assert all(p.alive() for p in procs)


# -- payloads over max_payload ------------------------------------------------------------


@pytest.mark.timeout(90)
def test_result_over_max_payload_fails_the_job_once(
    small_server: NatsServer, life_app: ModuleType, workers: Workers, records: Records
) -> None:
    """On a server with max_payload 64 KiB: a result at the worker's limit (1 KiB of room for
    the record) is stored and returned; one four times the limit fails its job once, clearly
    (JobFailed naming max_payload, status ``failed``, one dead letter), and the worker goes
    on running jobs."""
    url = small_server.url
    life_app.app.servers = [url]
    big = life_app.big
    worker = start(workers, url, "w", "-c", "5")

    at_limit = SMALL_PAYLOAD - 1024 - 2  # a JSON string: two quotes
    fits = big.delay(at_limit)
    assert fits.result(timeout=15) == "x" * at_limit

    over = big.delay(4 * SMALL_PAYLOAD)
    with pytest.raises(JobFailed) as caught:
        over.result(timeout=15)
    assert "max_payload" in caught.value.reason, caught.value.reason
    wait_stream_empty(url, 15, STREAM)
    status = life_app.app.status(over.id)
    assert status.state is JobState.FAILED and status.attempts == 1, status
    letters = dead_letters(url, DLQ_STREAM)
    assert set(letters) == {over.id}
    assert "max_payload" in letters[over.id].headers["Jsw-Dlq-Reason"]

    after = big.delay(10)
    assert after.result(timeout=15) == "x" * 10
    assert len(runs(records, "start", over.id)) == 1, "the job ran more than once"
    assert {r.pid for r in records.of("start")} == {worker.pid}
    assert worker.alive(), worker.tail()
    assert dead_letters(url, DLQ_STREAM).keys() == {over.id}
    report(
        "result_over_max_payload",
        max_payload=SMALL_PAYLOAD,
        stored_bytes=at_limit + 2,
        refused_bytes=4 * SMALL_PAYLOAD + 2,
        reason=caught.value.reason,
    )


@pytest.mark.timeout(90)
@pytest.mark.parametrize("size", [SMALL_PAYLOAD // 2, 2 * SMALL_PAYLOAD], ids=["half", "double"])
def test_error_over_max_payload_still_fails_the_job_visibly(
    small_server: NatsServer, life_app: ModuleType, workers: Workers, records: Records, size: int
) -> None:
    """On a server with max_payload 64 KiB, a task fails with an error message of half (then
    twice) the max_payload. The job is dead-lettered once (the dead letter is cut to fit), and
    the failure reaches its waiter and its status: JobFailed from the result, status
    ``failed``."""
    url = small_server.url
    life_app.app.servers = [url]
    worker = start(workers, url, "w", "-c", "5")
    job = life_app.loud.delay(size)
    wait_until(lambda: job.id in dead_letters(url, DLQ_STREAM), timeout=15, message="the dead letter")
    wait_stream_empty(url, 15, STREAM)
    assert len(runs(records, "start", job.id)) == 1
    assert worker.alive(), worker.tail()
    # The result first: the worker writes the job's record just after the dead letter.
    outcome: str
    try:
        job.result(timeout=5)
        outcome = "returned"
    except JobFailed as exc:
        outcome = f"JobFailed({exc.error_type})"
    except TimeoutError:
        outcome = "TimeoutError: no record"
    status = life_app.app.status(job.id)
    record_failed = [e for e in worker.log_events() if e.get("event") == "job.record_failed"]
    report(
        f"error_over_max_payload[{size}]",
        error_chars=size,
        status=status.state.value,
        result=outcome,
        record_failed=[e.get("error") for e in record_failed],
    )
    assert outcome == "JobFailed(ValueError)", f"{outcome}; worker log: {record_failed}"
    assert status.state is JobState.FAILED, status


# -- cancel broadcast ---------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_cancel_reaches_whichever_of_three_workers_runs_the_job(
    nats_server: NatsServer, life_app: ModuleType, workers: Workers, records: Records
) -> None:
    """Three workers with -c 1 and a prefetch of 1 hold two jobs each (one running, one
    buffered). Each running job is cancelled in turn, then each worker's second job once it
    starts: every cancel stops its job within a second, on whichever worker runs it, and only
    that job."""
    url = nats_server.url
    app, hold = life_app.app, life_app.hold
    app.servers = [url]
    procs = [workers.start(url, f"w{i}", "-c", "1", "--max-messages", "1", module=MODULE) for i in range(3)]
    for proc in procs:
        proc.wait_started()
    jobs = [hold.delay(f"held-{i}") for i in range(6)]  # their gates are never opened
    # A worker holds at most 2 (its one slot and a prefetch of 1): 6 delivered is 2 each.
    wait_until(
        lambda: consumer_state(url, STREAM, "default"),
        until=lambda s: s.pending == 0 and s.ack_pending == 6,
        timeout=20,
        message="all six jobs to be delivered",
    )
    pids = {p.pid for p in procs}
    cancelled: set[str] = set()
    latencies: dict[int, list[float]] = {pid: [] for pid in pids}

    def running() -> dict[int, str]:
        """The job each worker runs now (started and not cancelled)."""
        return {r.pid: r.job_id for r in records.of("start") if r.job_id not in cancelled}

    for _round in range(2):
        now = wait_until(running, until=lambda found: set(found) == pids, timeout=15,
                         message="each worker to run a job that is not cancelled")  # fmt: skip
        for pid, job_id in now.items():
            began = time.monotonic()
            assert app.cancel(job_id)
            cancelled.add(job_id)
            stopped = wait_until(functools.partial(runs, records, "stopped", job_id), timeout=10,
                                 message=f"{job_id} to stop")[0]  # fmt: skip
            assert stopped.pid == pid
            latencies[pid].append(round(stopped.at - began, 4))
            assert {r.job_id for r in records.of("stopped")} == cancelled, (
                "a job that was not cancelled stopped"
            )
    assert cancelled == {j.id for j in jobs}
    wait_stream_empty(url, 15, STREAM)
    assert records.of("done") == []
    assert {app.status(j.id).state for j in jobs} == {JobState.CANCELLED}
    assert all(p.alive() for p in procs)
    worst = max(t for found in latencies.values() for t in found)
    report("cancel_broadcast", latencies_s=sorted(latencies.values()), worst_s=worst)
    assert worst < 1.0
