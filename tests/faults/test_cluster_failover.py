"""A three-node cluster loses the leader of an R3 job stream to SIGKILL while workers run."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from types import ModuleType

import nats
import pytest
from nats.aio.msg import Msg

from jsworker import App
from jsworker.testing import NatsCluster

from ..support import wait_until
from .harness import (
    STREAM,
    Records,
    WorkerProc,
    Workers,
    dead_letters,
    leaders,
    longest_gap,
    move_leaders,
    node_index,
    summarize,
    wait_stream_empty,
    worker_connections,
    worker_env,
)
from .test_stream_leaders import stream_leader

pytestmark = pytest.mark.faults

# The cluster tests' workers create the job stream with three replicas.
R3 = {"JSWORKER_REPLICAS": "3"}
WORKER_ARGS = ("-c", "200", "-Q", "default")
JOB_MS = 200.0
LONG_JOB_MS = 500.0


def _start_on_another_node(
    cluster: NatsCluster, workers: Workers, taken: int, attempts: int = 10
) -> tuple[WorkerProc, int]:
    """Start a worker connected to a node other than ``taken``. Clients pick a random server from
    the list (and must get all three to fail over), so a worker that lands on ``taken`` is stopped
    and started again; ten tries all landing there would be a 1-in-59,000 event."""
    for attempt in range(attempts):
        worker = workers.start(cluster.urls, f"w2-{attempt}", *WORKER_ARGS, env=R3)
        worker.wait_started()
        nodes = [i for i, n in worker_connections(cluster).items() if n and i != taken]
        if nodes:
            return worker, nodes[0]
        worker.terminate()
    raise AssertionError(f"no worker landed off node {taken} in {attempts} tries")


@pytest.mark.timeout(180)
def test_cluster_stream_leader_sigkill(
    nats_cluster: NatsCluster, fault_app: ModuleType, workers: Workers, records: Records
) -> None:
    """R3 stream, two workers (-c 200) given all three URLs: w1 connected to node X, w2 to another
    node. The stream and consumer leaders are moved onto X (the worst case: one kill takes out
    both), 5,000 jobs of 500 ms are enqueued, and X is SIGKILLed mid-run (at least 1,500 done).
    Nothing is lost.
    Reported: the stall (longest gap between completions after the kill; a Raft election takes
    4-9 s), the time until a survivor named a new stream leader (polled, to about 1 s), the
    duplicates, and how and when each
    worker's pull loop reacted (w1 was connected to the killed node, w2 was not). Then jobs
    enqueued after the failover must reach w2 too, within 30 s: no worker is left stranded."""
    urls = nats_cluster.urls
    fault_app.app.servers = urls
    # The producer's view of the stream must match the workers'.
    fault_app.app.options = dataclasses.replace(fault_app.app.options, replicas=3)
    w1 = workers.start(urls, "w1", *WORKER_ARGS, env=R3)
    w1.wait_started()
    (x,) = [i for i, n in worker_connections(nats_cluster).items() if n]
    w2, w2_node = _start_on_another_node(nats_cluster, workers, taken=x)
    target = f"n{x + 1}"
    move_leaders(urls, STREAM, "default", target)

    stream_leader, consumer_leader = leaders(urls, STREAM, "default")
    assert node_index(stream_leader or "n0") == x, (stream_leader, target)

    # Jobs of 500 ms: two workers of -c 200 need at least 6 s for them all, longer than the
    # enqueue takes, so the kill lands mid-run however fast the workers are; with 200 ms jobs,
    # a loaded machine kept this process from looking for the 2 s they took, and every job
    # was done before it looked.
    jobs = fault_app.work.delay_many([(i, LONG_JOB_MS) for i in range(5000)])
    enqueued = {j.id for j in jobs}
    wait_until(
        lambda: len(records.done_ids()) >= 1500, timeout=60, interval=0.01, message="1,500 completions"
    )
    completions_at_kill = len(records.done_ids())
    assert completions_at_kill < len(enqueued), "every job was done before the kill"
    killed_at, killed_wall = time.monotonic(), time.time()
    nats_cluster.node(x).kill()

    survivors = [node.url for i, node in enumerate(nats_cluster.nodes) if i != x]
    new_leader: list[str | None] = [None]

    def elected() -> bool:
        new_leader[0] = leaders(survivors, STREAM, "default")[0]
        return new_leader[0] not in (None, target)

    wait_until(elected, timeout=60, interval=0.1, message="a new stream leader")
    election_s = time.monotonic() - killed_at

    wait_until(lambda: records.done_ids() >= enqueued, timeout=120, message="every job to complete")
    wait_stream_empty(survivors, 30)
    done = records.of("done")

    # w1 lost its connection: the reconnect hook re-pulls at once. w2's connection stayed up, so
    # its pull requests waiting on the dead consumer leader died without a word: unless it was
    # about to top up anyway (then it sees 503s until a new leader exists), only its heartbeat
    # watchdog (2 x idle_heartbeat of silence) tells it. Either way it must pull again and get
    # work again.
    repull: dict[str, list[object] | None] = {}
    for name, worker in (("w1", w1), ("w2", w2)):

        def reacted(worker: WorkerProc = worker) -> bool:
            return _first_pull_event(worker, killed_wall) is not None

        wait_until(reacted, timeout=30, message=f"{name} to re-pull")
        repull[name] = _first_pull_event(worker, killed_wall)
    # Probes in batches until w2 has run one: its first pull after the kill may have gone out
    # before a new consumer leader existed, and a single batch could be taken whole by w1
    # before w2's next pull arrives. 30 s is several watchdog rounds.
    probe: set[str] = set()

    def w2_ran_a_probe() -> bool:
        batch = {j.id for j in fault_app.work.delay_many([(i, JOB_MS) for i in range(100)])}
        probe.update(batch)
        # One batch at a time, each run to the end: the workers set the pace, not a clock.
        wait_until(lambda: records.done_ids() >= batch, timeout=30, message="a batch of probe jobs")
        return any(r.pid == w2.pid for r in records.of("done") if r.job_id in probe)

    wait_until(w2_ran_a_probe, timeout=30, interval=0, message="w2 to run one of the probe jobs")
    probe_done_by = Counter(r.pid for r in records.of("done") if r.job_id in probe)
    # Per worker, the longest gap runs from the kill (or a completion after it) to the worker's
    # next completion; the probe jobs give a worker that got nothing more of the first batch one.
    per_worker = {
        name: round(longest_gap((r.at for r in records.of("done") if r.pid == w.pid), after=killed_at), 3)
        for name, w in (("w1", w1), ("w2", w2))
    }
    summary = summarize(
        "cluster_stream_leader_sigkill",
        enqueued,
        records,
        dead_letters(survivors),
        completions_at_kill=completions_at_kill,
        killed=target,
        consumer_leader_at_kill=consumer_leader,
        new_stream_leader=new_leader[0],
        new_leader_answered_s=round(election_s, 3),
        stall_s=round(longest_gap((r.at for r in done), after=killed_at), 3),
        w1_on_killed_node_stall_s=per_worker["w1"],
        w2_on_other_node_stall_s=per_worker["w2"],
        w1_repull=repull["w1"],
        w2_repull=repull["w2"],
        w2_node=f"n{w2_node + 1}",
        probe_done_by_w1_w2=[probe_done_by[w1.pid], probe_done_by[w2.pid]],
    )
    assert w1.alive() and w2.alive(), (w1.tail(), w2.tail())
    assert summary["lost"] == 0
    assert summary["dead_lettered"] == 0
    assert probe_done_by[w2.pid] > 0, "the worker on a surviving node never got work again"


def _first_pull_event(worker: WorkerProc, since: float) -> list[object] | None:
    """[event, seconds after ``since``] of the worker's first pull-loop log event after ``since``
    (unix time): how and when its pull loop reacted to the failover."""
    for event in worker.log_events():
        name = str(event.get("event", ""))
        if not name.startswith("pull."):
            continue
        at = datetime.fromisoformat(str(event["timestamp"])).timestamp()
        if at >= since:
            return [name, round(at - since, 3)]
    return None


@pytest.mark.timeout(120)
def test_status_waits_out_a_stream_without_a_leader(nats_cluster: NatsCluster, tmp_path: Path) -> None:
    """``jsworker status`` (one look) while the job stream has no leader (two of its three
    nodes down): it says it waits, and answers once the nodes are back, instead of failing."""
    urls = nats_cluster.urls
    env = {**worker_env(urls, tmp_path / "record.log"), **R3}
    command = [sys.executable, "-m", "jsworker"]
    made = subprocess.run(
        [*command, "provision", "fault_app"], env=env, capture_output=True, text=True, timeout=60
    )
    assert made.returncode == 0, made.stderr
    for i in (1, 2):
        nats_cluster.node(i).kill()
    with open(tmp_path / "status.err", "w+") as err:
        status = subprocess.Popen(
            [*command, "status", "fault_app", "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        try:
            wait_until(
                lambda: "waiting up to" in (tmp_path / "status.err").read_text(),
                timeout=60,
                message="status to say it waits",
            )
            assert status.poll() is None
            for i in (1, 2):
                nats_cluster.node(i).restart()
            out, _ = status.communicate(timeout=60)
        finally:
            if status.poll() is None:
                status.kill()
    assert status.returncode == 0, (tmp_path / "status.err").read_text()
    assert "default" in {json.loads(line)["queue"] for line in out.splitlines()}


@pytest.mark.timeout(120)
def test_an_enqueue_through_a_leader_election_only_waits_for_the_election(nats_cluster: NatsCluster) -> None:
    """The job stream's leader is killed: the next enqueue is asked again until the new leader
    stores it, and never waits out a try at creating the streams (a ``STREAM.INFO`` that
    nobody answers during the election) as it would on a server that never had them."""
    urls = nats_cluster.urls
    app = App("elect", urls, replicas=3)

    @app.task
    async def job(n: int) -> None: ...

    async def scenario() -> list[str]:
        await app.provision()
        await job.adelay(0)  # the stream is there: this connection has stored a job in it
        leader = await asyncio.to_thread(stream_leader, urls, "JSW_ELECT")
        assert leader is not None
        # Connected to a node that stays up: it sees every request made after the kill.
        spy = await nats.connect([u for i, u in enumerate(urls) if i != node_index(leader)])
        asked: list[str] = []

        async def note(msg: Msg) -> None:
            asked.append(msg.subject)

        try:
            await spy.subscribe("$JS.API.STREAM.*.JSW_ELECT", cb=note)
            await spy.flush()
            nats_cluster.node(node_index(leader)).kill()
            receipt = await job.adelay(1)
            assert receipt.seq > 1 and not receipt.duplicate
            await spy.flush()
            return asked
        finally:
            await spy.close()
            await app.aclose()

    assert asyncio.run(scenario()) == []
