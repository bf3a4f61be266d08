"""A three-node cluster loses, in turn, the leader of each of an R3 app's streams to SIGKILL while
two workers run every kind of job at once."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from jsworker._limits.spec import parse_rate
from jsworker.testing import NatsCluster
from jsworker.workflows import chord, group

from ..support import UNSETTLED, most_in_any_second, wait_until
from .harness import (
    Records,
    WorkerProc,
    Workers,
    app_module,
    dead_letters,
    longest_gap,
    node_index,
    request_json,
    stream_subjects,
    summarize,
)

pytestmark = pytest.mark.faults

R3 = {"JSWORKER_REPLICAS": "3"}
MODULE = "mixed_app"
STREAM = "JSW_MIX"

#: The streams whose leaders are killed, in this order, and what each holds.
KILLED = {
    "jobs": STREAM,
    "schedules": "JSW_MIX_SCHED",
    "claims": "JSW_MIX_CLAIMS",
    "tally": "JSW_MIX_TALLY",
    "leases": "JSW_MIX_LEASES",
    "rates": "JSW_MIX_RATES",
    "records": "KV_jsw_mix_jobs",
}
#: One round of load every ROUND seconds; a chord every CHORD_EVERY rounds.
ROUND = 0.25
CHORD_EVERY = 12
CHORD_SIZE = 10
#: Tasks whose every job the producer enqueues itself (chord members and callbacks, ticks aside).
ENQUEUED_TASKS = ("plain", "kept", "later", "turn", "parted", "rated")
#: Log events a worker writes only when a job's run was counted against it or ended it: the
#: tasks here never raise, so each would be an attempt spent on the servers' outage.
SPENT = ("job.retry", "job.dead_lettered", "job.internal_error")


@pytest.fixture
def mixed_app() -> Iterator[ModuleType]:
    """The mixed app module, as the producer in this process uses it; settings restored after."""
    yield from app_module(MODULE)


# -- the servers --------------------------------------------------------------------------


def _healthy(cluster: dict[str, Any]) -> bool:
    """A replicated asset (stream or consumer) with a leader and both followers current."""
    replicas = cluster.get("replicas") or []
    return (
        bool(cluster.get("leader"))
        and len(replicas) == 2
        and all(r.get("current") and not r.get("offline") for r in replicas)
    )


def settled(urls: Sequence[str], *, every: bool = True) -> bool:
    """Every stream of the app, and every consumer of them, has a leader and two current
    followers: a node may be killed now without leaving any of them short of a quorum.
    ``every=False``: of those that exist so far (the streams of the killed list are made by
    the features' first writes)."""
    listed = request_json(urls, "$JS.API.STREAM.LIST", {}, timeout=2.0)
    if listed.get("missing") or "error" in listed:
        return False
    ours = {
        s["config"]["name"]: s.get("cluster") or {}
        for s in listed.get("streams") or []
        if "MIX" in s["config"]["name"] or "_mix_" in s["config"]["name"]
    }
    if (every and not set(KILLED.values()) <= set(ours)) or not all(map(_healthy, ours.values())):
        return False
    for name in ours:
        consumers = request_json(urls, f"$JS.API.CONSUMER.LIST.{name}", {}, timeout=2.0)
        if "error" in consumers or not all(
            _healthy(c.get("cluster") or {}) for c in consumers.get("consumers") or []
        ):
            return False
    return True


def stream_leader(urls: Sequence[str], stream: str) -> str | None:
    """The node leading ``stream`` (None while it has none)."""
    try:
        info = request_json(urls, f"$JS.API.STREAM.INFO.{stream}", timeout=1.0)
    except UNSETTLED:  # without a leader nobody answers, and the caller polls
        return None
    leader = (info.get("cluster") or {}).get("leader")
    return str(leader) if leader else None


def replaced(old: str, leader: str | None) -> bool:
    """Whether ``leader`` is a new leader, not ``old`` nor none."""
    return leader not in (None, old)


@dataclass
class Kill:
    """One stream leader's SIGKILL and how the cluster came back."""

    what: str
    stream: str
    node: str
    at: float  # monotonic
    wall: float
    new_leader: str | None = None
    elected_s: float = 0.0
    ends: float = 0.0  # monotonic: the next kill, or the end of the load


# -- the load -----------------------------------------------------------------------------


@dataclass
class Load:
    """What the producer enqueued, and how long each enqueue call took."""

    jobs: dict[str, tuple[str, Any]] = field(default_factory=dict)  # job id -> (task, argument)
    chords: dict[str, tuple[Any, int]] = field(default_factory=dict)  # callback id -> (handle, sum)
    calls: list[tuple[float, float]] = field(default_factory=list)  # (monotonic start, seconds)
    errors: list[str] = field(default_factory=list)

    async def timed(self, send: Callable[[], Awaitable[Any]]) -> Any:
        began = time.monotonic()
        try:
            return await send()
        except Exception as exc:  # an enqueue that gave up: reported, and the test fails on it
            self.errors.append(repr(exc))
            return None
        finally:
            self.calls.append((began, time.monotonic() - began))


async def produce(app: ModuleType, load: Load, stop: threading.Event) -> None:
    """Rounds of every kind of job until ``stop`` is set: about 28 jobs a second, and a chord of
    CHORD_SIZE members every CHORD_EVERY rounds. A round waits for its enqueues, so an enqueue
    held by an election delays the rounds after it, as it would delay a real producer."""
    next_round = time.monotonic()
    for n in itertools.count():
        if stop.is_set():
            return
        sends: list[tuple[str, Any, Callable[[], Awaitable[Any]]]] = [
            ("plain", 2 * n, partial(app.plain.adelay, 2 * n)),
            ("plain", 2 * n + 1, partial(app.plain.adelay, 2 * n + 1)),
            ("kept", n, partial(app.kept.adelay, n)),
            ("later", n, partial(app.later.aapply, (n,), countdown=0.5 + (n % 5) * 0.5)),
            ("turn", f"a{n % 3}", partial(app.turn.adelay, f"a{n % 3}", n)),
            ("parted", f"p{n % 2}", partial(app.parted.adelay, f"p{n % 2}", n)),
            ("rated", n, partial(app.rated.adelay, n)),
        ]
        for task, argument, send in sends:
            job = await load.timed(send)
            if job is not None:
                load.jobs[job.id] = (task, argument)
        if n % CHORD_EVERY == 0:
            k = n // CHORD_EVERY
            values = range(k * CHORD_SIZE, (k + 1) * CHORD_SIZE)
            members = group([app.member.s(i) for i in values], id=f"chord{k}")
            flow = await load.timed(chord(members, app.collect.s()).aapply)
            if flow is not None:
                load.chords[f"chord{k}-cb"] = (flow, sum(values))
        next_round += ROUND
        # The load's schedule: a round is due ROUND seconds after the one before (a round held
        # up by an election is followed at once by those it delayed). The clock is the condition.
        await asyncio.sleep(max(0.0, next_round - time.monotonic()))


def explain(urls: Sequence[str], procs: Sequence[WorkerProc], left: set[str]) -> str:
    """For a failure: what the workers said of the jobs ``left`` (and of the limits and moves
    they wait on), where those jobs' messages are, and what the job stream's consumers hold."""
    interesting = ("partition.", "fair.", "job.internal", "relay.", "pull.")
    events = [e for p in procs for e in p.log_events()]
    # A chord's callback (``chord<k>-cb``) waits on its members (``chord<k>-...``).
    flows = tuple(f"{job_id.rsplit('-', 1)[0]}-" for job_id in left if job_id.endswith("-cb"))
    own = [e for e in events if e.get("job_id") in left or str(e.get("job_id")).startswith(flows or "\0")]
    # Debug lines (a pull's 408s) would crowd out the rest of the last forty.
    around = [
        e
        for e in events
        if e.get("job_id") not in left
        and str(e.get("event")).startswith(interesting)
        and e.get("level") != "debug"
    ]
    # Who moved the fair queue's jobs, over the whole run: a job left in its intake waits on that.
    movers = [
        {"worker": p.log.name, **e}
        for p in procs
        for e in p.log_events()
        if str(e.get("event")).startswith(("fair.", "partition.lease_lost"))
    ]
    subjects = [s for s in stream_subjects(urls, STREAM) if s.rsplit(".", 1)[-1] in left]
    get = f"$JS.API.STREAM.MSG.GET.{STREAM}"
    where = {s: request_json(urls, get, {"last_by_subj": s}).get("message", {}).get("seq") for s in subjects}
    consumers = request_json(urls, f"$JS.API.CONSUMER.LIST.{STREAM}", {}, timeout=5.0)
    figures = ("num_pending", "num_ack_pending", "num_redelivered", "num_waiting", "delivered", "ack_floor")
    held = {c["name"]: {k: c.get(k) for k in figures} for c in consumers.get("consumers") or []}
    return (
        f"workers said of them: {own}\nand of their limits and pulls: {around[-40:]}\n"
        f"the fair movers: {movers[-40:]}\n"
        f"in the job stream: {where}\nconsumers: {held}"
    )


# -- what the records say -----------------------------------------------------------------


def due_lines(workers: Workers) -> list[tuple[str, float, float]]:
    """(job id, wall clock at start, due time) of each run of a scheduled job."""
    if not workers.record.exists():
        return []
    out = []
    for line in workers.record.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "due":
            out.append((parts[1], float(parts[2]), float(parts[3])))
    return out


def overlapping(records: Records, accounts: dict[str, Any]) -> list[str]:
    """Accounts of which two ``parted`` runs overlapped (a run: a start and the done of the same
    worker and attempt)."""
    begun = {(r.job_id, r.pid, r.attempt): r.at for r in records.of("start", "parted")}
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in records.of("done", "parted"):
        spans[accounts[r.job_id]].append((begun[(r.job_id, r.pid, r.attempt)], r.at))
    return [
        account
        for account, runs in spans.items()
        if any(b[0] < a[1] for a, b in itertools.pairwise(sorted(runs)))
    ]


def moves(procs: Sequence[WorkerProc], copies: list[tuple[str, list[int]]]) -> str:
    """For a failure: what the workers said of the jobs stored twice (every line) and of the
    relays' moves and claims (warnings and above), in the order each worker said it."""
    ids = {job_id for job_id, _ in copies}
    prefixes = ("relay.", "delayed.", "schedules.", "job.fired", "job.claim", "job.restored")
    said = [
        {"worker": p.log.name, **e}
        for p in procs
        for e in p.log_events()
        if e.get("job_id") in ids or (str(e.get("event")).startswith(prefixes) and e.get("level") != "debug")
    ]
    return f"the workers on them and on the moves: {said[-40:]}"


def reruns(records: Records, record: Path) -> tuple[int, list[tuple[str, list[int]]]]:
    """Runs beyond a job's first, and the jobs whose runs ran more than one message (the
    stream sequences): a job stored twice, never allowed. One message handed out again with
    the same delivery count (a consumer's new leader that had not heard of the delivery) is a
    rerun, not a copy."""
    extra = sum(n - 1 for n in records.counts("start").values())
    seqs: dict[str, set[int]] = defaultdict(set)
    for line in record.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "seq":
            seqs[parts[1]].add(int(parts[2]))
    copies = [(job_id, sorted(ran)) for job_id, ran in seqs.items() if len(ran) > 1]
    return extra, copies


# -- the test -----------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_each_stream_leader_killed_in_turn_under_mixed_load(
    nats_cluster: NatsCluster, mixed_app: ModuleType, workers: Workers, records: Records
) -> None:
    """R3 streams on three nodes, two workers (-c 50) given all three servers, a producer
    enqueueing plain jobs, kept results, delayed jobs, fair-queue jobs, partition-limited and
    rate-limited jobs, a chord every 3 s, while a 1-second schedule ticks. The leader of the job
    stream, then of the schedules, claims, tally, leases, rates streams and the records bucket,
    is SIGKILLed; its node is restarted once another leads, and the next kill waits until every
    stream and consumer of the app has its three replicas current again.

    Checked: nothing lost (every job ran, the job stream's queues and fair intake are empty);
    every kept result and chord result reads back right; each chord's callback was stored once
    (run as its first delivery once: a second run only as a redelivery); every fair job ran;
    no two runs of a partition overlapped; the rate limit held; no delayed job or tick started
    early; a job ran twice only as a redelivery of its one message; and no attempt was spent on
    the outage: no worker retried, dead-lettered or failed internally any job (the tasks never
    raise, so any of those would be the outage's doing) and nothing is dead-lettered.
    Reported: per kill, the stall (longest gap between job starts from the kill to the next
    one), the new leader's election time, the ticks skipped, the longest enqueue call."""
    urls = nats_cluster.urls
    mixed_app.app.servers = urls
    # The producer's view of the streams must match the workers'.
    mixed_app.app.options = dataclasses.replace(mixed_app.app.options, replicas=3)
    # At debug level each job's start and end is logged: a failure can say what became of one.
    debug = ("--log-level", "debug")
    procs = [workers.start(urls, f"w{i}", "-c", "50", *debug, module=MODULE, env=R3) for i in range(2)]
    for proc in procs:
        proc.wait_started()
    # The load starts once the streams the workers made have their leaders: on a loaded
    # machine a three-node cluster took 16 s to elect them, past an enqueue's 15 s of retries
    # (publish_timeout), before any kill.
    wait_until(
        lambda: settled(urls, every=False),
        timeout=60,
        interval=0.2,
        ignore=UNSETTLED,
        message="the workers' streams settled",
    )

    load, stop = Load(), threading.Event()
    producer = threading.Thread(target=lambda: asyncio.run(produce(mixed_app, load, stop)), daemon=True)
    producer.start()
    kills: list[Kill] = []
    try:
        # Every stream exists once each feature has written: the first chord, rate window, lease.
        wait_until(
            lambda: settled(urls), timeout=60, interval=0.2, ignore=UNSETTLED, message="every stream settled"
        )
        wait_until(lambda: records.done_ids("tick"), until=lambda t: len(t) >= 2, timeout=20, message="ticks")
        for what, stream in KILLED.items():
            wait_until(
                lambda: settled(urls),
                timeout=60,
                interval=0.2,
                ignore=UNSETTLED,
                message="the cluster settled",
            )
            leader = wait_until(partial(stream_leader, urls, stream), timeout=10, message="the leader")
            assert leader is not None
            x = node_index(leader)
            kill = Kill(what, stream, leader, time.monotonic(), time.time())
            if kills:
                kills[-1].ends = kill.at
            kills.append(kill)
            nats_cluster.node(x).kill()
            survivors = [node.url for i, node in enumerate(nats_cluster.nodes) if i != x]
            kill.new_leader = wait_until(
                partial(stream_leader, survivors, stream),
                until=partial(replaced, leader),
                timeout=60,
                interval=0.1,
                message=f"a new leader of {stream}",
            )
            kill.elected_s = time.monotonic() - kill.at
            nats_cluster.node(x).restart()
        wait_until(
            lambda: settled(urls), timeout=60, interval=0.2, ignore=UNSETTLED, message="the cluster settled"
        )
        # Load goes on until the schedule ticked past the last kill: its skipped ticks are counted.
        last = kills[-1].wall
        wait_until(
            lambda: [due for _, _, due in due_lines(workers) if due > last + 2],
            timeout=30,
            message="a tick after the last kill",
        )
    finally:
        stop.set()
        producer.join(30)
    kills[-1].ends = time.monotonic()
    assert not load.errors, load.errors

    enqueued = set(load.jobs) | set(load.chords)

    def not_done() -> dict[str, list[str]]:
        """The jobs and callbacks not done yet, by task, for the failure message."""
        by_task: dict[str, list[str]] = defaultdict(list)
        for job_id in sorted(enqueued - records.done_ids()):
            by_task[load.jobs[job_id][0] if job_id in load.jobs else "collect"].append(job_id)
        return dict(by_task)

    try:
        wait_until(not_done, until=lambda m: not m, timeout=90, message="every job and callback to run")
    except AssertionError as exc:
        # What the workers said of the jobs left, and where their messages are: the failure
        # shows why they did not run.
        left = {job_id for ids in not_done().values() for job_id in ids}
        raise AssertionError(f"{exc}\n{explain(urls, procs, left)}") from None

    def waiting() -> dict[str, int]:
        subjects = stream_subjects(urls, STREAM)
        return {
            s: n for s, n in subjects.items() if s.startswith(("jsw.mix.q.", "jsw.mix.in.", "jsw.mix.later."))
        }

    try:
        wait_until(
            waiting, until=lambda w: not w, timeout=30, ignore=UNSETTLED, message="queues and intake empty"
        )
    except AssertionError as exc:
        left = {s.rsplit(".", 1)[-1] for s in waiting()}
        raise AssertionError(f"{exc}\n{explain(urls, procs, left)}") from None

    kept = {job_id: n for job_id, (task, n) in load.jobs.items() if task == "kept"}
    unreadable = {
        job_id for job_id, n in kept.items() if mixed_app.app.job(job_id).result(timeout=30) != n * n
    }
    wrong_chords = {cb for cb, (flow, total) in load.chords.items() if flow.result(timeout=30) != total}
    callback_runs = Counter(r.job_id for r in records.of("start", "collect"))

    starts = [r.at for r in records.of("start")]
    ticks = {round(due) for job_id, _, due in due_lines(workers) if job_id.startswith("pulse-")}
    missing_ticks = set(range(min(ticks), max(ticks) + 1)) - ticks
    early = [(job_id, round(due - wall, 3)) for job_id, wall, due in due_lines(workers) if wall < due]
    accounts = {job_id: argument for job_id, (task, argument) in load.jobs.items() if task == "parted"}
    rate = parse_rate(mixed_app.RATE)
    rated_most = most_in_any_second([r.at for r in records.of("start", "rated")])
    extra_runs, copies = reruns(records, workers.record)
    spent = Counter(str(e.get("event")) for p in procs for e in p.log_events() if e.get("event") in SPENT)
    per_kill = [
        {
            "stream": k.what,
            "at_s": round(k.at - kills[0].at, 3),
            "killed": k.node,
            "new_leader": k.new_leader,
            "elected_s": round(k.elected_s, 3),
            "stall_s": round(longest_gap((t for t in starts if t < k.ends), after=k.at), 3),
            "skipped_ticks": sum(1 for s in missing_ticks if k.wall <= s < k.wall + (k.ends - k.at)),
            "enqueue_max_s": round(max((d for at, d in load.calls if k.at <= at < k.ends), default=0.0), 3),
        }
        for k in kills
    ]
    summary = summarize(
        "stream_leaders_sigkill_mixed_load",
        enqueued,
        records,
        dead_letters(urls, "JSW_MIX_DLQ"),
        by_task=dict(Counter(task for task, _ in load.jobs.values())),
        chords=len(load.chords),
        kills=per_kill,
        ticks_ran=len(ticks),
        ticks_skipped=len(missing_ticks),
        reruns=extra_runs,
        redelivered_runs=sum(1 for r in records.of("start") if r.attempt > 1),
        enqueue_max_s=round(max(d for _, d in load.calls), 3),
        enqueue_calls=len(load.calls),
        callback_reruns=sum(callback_runs.values()) - len(callback_runs),
        rated_most_in_a_second=rated_most,
        spent=dict(spent),
    )
    assert all(p.alive() for p in procs), [p.tail() for p in procs]
    assert summary["lost"] == 0, sorted(enqueued - records.done_ids())[:10]
    assert summary["dead_lettered"] == 0
    assert not spent, f"attempts spent on the outage: {spent}"
    assert not unreadable, f"kept results unreadable or wrong: {sorted(unreadable)[:10]}"
    assert not wrong_chords, wrong_chords
    assert set(callback_runs) == set(load.chords), callback_runs
    assert not copies, f"jobs stored twice (runs of more than one message): {copies[:10]}\n" + moves(
        procs, copies
    )
    assert not overlapping(records, accounts), "two runs of one partition overlapped"
    assert rated_most <= rate.count + 2 * rate.burst, rated_most
    assert not early, f"started before they were due: {early[:10]}"
    assert {t for t in ENQUEUED_TASKS if records.done_ids(t)} == set(ENQUEUED_TASKS)
