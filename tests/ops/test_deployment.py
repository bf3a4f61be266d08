"""Deployment smoke test: the templates of deploy/ run as a whole with real processes, and the
deployment loses no job when a node crashes or the cluster is restarted node by node.

One deployment for the module, on loopback, without Docker:

- deploy/nats: three nats-server processes with the compose configs, dev certificates and the
  role users of auth.conf (made-up passwords); only ports, file paths and the store substituted
  (``live.secured_cluster``), so lame duck mode, JetStream limits and TLS routes are as shipped.
- Two workers started with the worker image's command (``jsworker run "$JSWORKER_APP"
  --metrics-port ...`` plus compose's worker ``command:``), the image's ENV and compose's worker
  environment; each on a metrics port of its own, running tests/ops/apps/deployed/tasks.py as
  the image's ``/app``.
- Debian's Prometheus with deploy/prometheus/prometheus.yml, its ``dns_sd_configs`` replaced by
  the two workers' ports, and alerts.yml as it is: 15 s scrape and evaluation intervals, so the
  tests wait tens of seconds for it (always for a condition, with a deadline).
- The producer, in this process: the quickstart app as the producer user, enqueueing from a
  thread at a steady rate while the faults happen.

Run with ``-s`` to see each scenario's figures, one ``deployment figures: {...}`` line each.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from jsworker import App, Job, Task
from jsworker.testing._recording import RECORD_ENV

from .. import launcher
from ..faults.harness import Records
from ..integration.workers import stop
from ..support import UNSETTLED, wait_until
from .live import (
    APP,
    NODES,
    PROMETHEUS,
    ImageWorker,
    PrometheusAPI,
    Secured,
    binary,
    compose_worker_env,
    http_status,
    image_env,
    load_compose,
    meta_leader,
    run_compose_provision,
    secured_cluster,
    start_image_worker,
    start_prometheus,
    stream_info,
)
from .opsfiles import (
    ALERTS,
    APPS,
    PROMETHEUS_YML,
    alert_rules,
    concrete,
    dashboard_targets,
    image_run_args,
    load_yaml,
    seconds,
    selectors,
)

# Not deselected by the default suite: marked so that a quick local run can leave it out.
pytestmark = pytest.mark.slow

APP_DIR = APPS / "deployed"  # the image's /app
JOB_STREAM = f"JSW_{APP.upper()}"
DLQ_STREAM = f"{JOB_STREAM}_DLQ"
STREAMS = (JOB_STREAM, DLQ_STREAM, f"{JOB_STREAM}_EVENTS")
WORKERS = int(load_compose()["services"]["worker"]["deploy"]["replicas"])
RATE = 30.0  # jobs per second the producer enqueues while a fault happens
# A job whose ack was lost with a node runs again after its queue's ack_wait (30 s, the
# default): every job must have run within that and some margin.
ALL_RUN_TIMEOUT = 90.0
# The cluster is whole again well within this after a node is back.
WHOLE_TIMEOUT = 90.0
DEAD_LETTER_ALERT = "JsworkerDeadLettersArriving"
# Dashboard queries this deployment may leave empty, with the reason.
MAY_BE_EMPTY = {
    ("Fired jobs dropped unrun", "A"): "only a schedule fired twice or a cancel racing a firing makes "
    "the series, and nothing here does; tests/ops/test_prometheus.py makes both",
    ("Starts held back by limits", "A"): "the deployed app declares no rate limit",
    ("Starts held back by limits", "B"): "the deployed app declares no per-partition limit",
    ("Fair queues: waiting their turn", "A"): "the deployed app declares no fair queue",
    ("Fair queues: waiting their turn", "B"): "the deployed app declares no fair queue",
}


def _interval(name: str) -> float:
    """A global interval of deploy/prometheus/prometheus.yml, in seconds."""
    return seconds(load_yaml(PROMETHEUS_YML)["global"][name])


def _figures(**figures: Any) -> None:
    print("deployment figures:", json.dumps(figures))  # noqa: T201 - what `pytest -s` is for here


# --- the deployment ---------------------------------------------------------------------------


@dataclass
class ProducerTasks:
    """The workers' tasks by name, as an application enqueues them (the bodies run on workers)."""

    app: App
    deliver: Task[[int], Any]
    doomed: Task[[int], Any]
    flaky: Task[[int], Any]
    slow: Task[[int], Any]


@dataclass
class Deployment:
    cluster: Secured
    workers: list[ImageWorker]
    prometheus: PrometheusAPI
    records: Records  # every run of `deliver`, from the workers
    tasks: ProducerTasks


def _producer(cluster: Secured) -> ProducerTasks:
    app = App(
        APP,
        cluster.urls(),
        user=f"{APP}-producer",
        password=cluster.password("producer"),
        tls_ca=str(cluster.ca),
        events=True,
    )

    # The workers' tasks by name: their bodies never run here.
    async def runs_on_the_workers(n: int) -> None:
        raise AssertionError("runs on the workers")

    deliver, doomed, flaky, slow = (
        app.task(name=name)(runs_on_the_workers) for name in ("deliver", "doomed", "flaky", "slow")
    )
    return ProducerTasks(app, deliver, doomed, flaky, slow)


def _worker_env(cluster: Secured, record: Path, service: str = "worker") -> dict[str, str]:
    """A worker container's environment (or that of compose's ``service`` run from the worker
    image): the image's ENV, then compose's environment; plus where the test app records its
    runs. No JSWORKER_* variable or role password of this process reaches it."""
    inherited = {
        k: v for k, v in os.environ.items() if not k.startswith("JSWORKER_") and k not in cluster.passwords
    }
    service_env = compose_worker_env(cluster, service)
    return {**inherited, **image_env(APP_DIR), **service_env, RECORD_ENV: str(record)}


def _prometheus_config(dest: Path, workers: list[ImageWorker]) -> Path:
    """deploy/prometheus as compose mounts it, with the workers found at their ports on loopback
    instead of through Docker's DNS. Nothing else changes: intervals, rule files, job name."""
    config = load_yaml(PROMETHEUS_YML)
    (job,) = config["scrape_configs"]
    (dns,) = job.pop("dns_sd_configs")
    assert dns["names"] == ["worker"], dns
    image = image_run_args([], "app")
    assert str(dns["port"]) == image[image.index("--metrics-port") + 1], f"{dns}: not the image's port"
    job["static_configs"] = [{"targets": [f"127.0.0.1:{w.metrics_port}" for w in workers]}]
    assert config["rule_files"] == [ALERTS.name], config["rule_files"]
    dest.mkdir(parents=True)
    shutil.copy(ALERTS, dest / ALERTS.name)
    # JSON is YAML.
    (dest / PROMETHEUS_YML.name).write_text(json.dumps(config, indent=2), encoding="utf-8")
    return dest / PROMETHEUS_YML.name


@pytest.fixture(scope="module")
def deployment(dev_certs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """The whole deployment, started once for the module and stopped (by pid) after it."""
    binary(PROMETHEUS)  # skip (or fail on CI) before starting anything
    tmp = tmp_path_factory.mktemp("deployment")
    procs: list[launcher.Process] = []
    with pytest.MonkeyPatch.context() as monkeypatch, secured_cluster(dev_certs, tmp, monkeypatch) as cluster:
        record = tmp / "record.log"
        env = _worker_env(cluster, record)
        tasks: ProducerTasks | None = None
        try:
            run_compose_provision(_worker_env(cluster, record, "provision"), APP_DIR)
            workers = []
            for i in range(1, WORKERS + 1):
                worker = start_image_worker(env, APP_DIR, tmp / f"worker-{i}.log")
                procs.append(worker.proc)
                workers.append(worker)
            config = _prometheus_config(tmp / "prometheus", workers)
            prometheus = start_prometheus(config, tmp / "prometheus-data", tmp / "prometheus.log", procs)
            tasks = _producer(cluster)
            yield Deployment(cluster, workers, prometheus, Records(record), tasks)
        finally:
            if tasks is not None:
                tasks.app.close()
            for proc in reversed(procs):
                # Workers finish their jobs first (--grace 30); they are idle by now.
                stop(proc, timeout=40)


# --- the producer -----------------------------------------------------------------------------


class Producing:
    """An application enqueueing at a steady rate from a thread, until the block ends: every
    error, the time each enqueue returned, the slowest one."""

    def __init__(self, enqueue: Callable[[int], Job], rate: float = RATE) -> None:
        self._enqueue = enqueue
        self._period = 1.0 / rate
        self.ids: list[str] = []
        self.returned_at: list[float] = []  # monotonic times of successful enqueues
        self.errors: list[tuple[float, str]] = []  # (monotonic time, the error)
        self.slowest = 0.0
        self.started_at = self.stopped_at = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def __enter__(self) -> Producing:
        self.started_at = time.monotonic()
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        # An enqueue in progress gives up within its publish_timeout (15 s).
        self._thread.join(timeout=30)
        self.stopped_at = time.monotonic()
        if exc is None:
            assert not self._thread.is_alive(), "the producer thread did not stop"

    def _run(self) -> None:
        n = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                job = self._enqueue(n)
            except Exception as exc:  # every one is a failure of the deployment: counted, shown
                self.errors.append((time.monotonic(), f"{type(exc).__name__}: {exc}"))
            else:
                self.ids.append(job.id)
                self.returned_at.append(time.monotonic())
            self.slowest = max(self.slowest, time.monotonic() - began)
            n += 1
            # After a stall, go on at the rate rather than catching up in a burst.
            next_at = max(next_at + self._period, time.monotonic())
            self._stop.wait(next_at - time.monotonic())

    def since(self, at: float) -> int:
        """Successful enqueues that returned at or after ``at``."""
        return sum(1 for t in list(self.returned_at) if t >= at)

    def went_on(self, count: int, after: float, timeout: float = 60) -> bool:
        """Whether ``count`` enqueues succeeded after ``after`` within ``timeout`` seconds (waits
        for that, not longer): the application kept going."""
        try:
            wait_until(lambda: self.since(after) >= count, timeout=timeout, interval=0.1)
        except AssertionError:
            return False
        return True

    def wait_for(self, count: int, after: float, what: str) -> None:
        assert self.went_on(count, after), f"fewer than {count} enqueues succeeded {what}: {self.errors[-3:]}"

    def longest_stall(self) -> tuple[float, float]:
        """(when it began, how long) of the longest time without a successful enqueue while
        producing, in monotonic time."""
        times = [self.started_at, *self.returned_at, self.stopped_at]
        length, began = max(((b - a, a) for a, b in pairwise(times)), default=(0.0, self.started_at))
        return began, length


# What the cluster went through: (what, from, until) in monotonic time.
Phase = tuple[str, float, float]


def _during(phases: list[Phase], start: float, end: float | None = None) -> str:
    """The phase a moment (or the one a span overlaps most) fell in."""
    end = start if end is None else end
    overlaps = [(min(end, until) - max(start, since), what) for what, since, until in phases]
    overlap, what = max(overlaps, default=(-1.0, ""))
    return what if overlap >= 0 else "cluster whole"


def _seconds_until(condition: Callable[[], bool], since: float, what: str) -> float | None:
    """Seconds from ``since`` until ``condition`` held, or None if it did not within
    ALL_RUN_TIMEOUT (the figures then show what is missing)."""
    try:
        wait_until(condition, timeout=ALL_RUN_TIMEOUT, interval=0.2, ignore=UNSETTLED, message=what)
    except AssertionError:
        return None
    return round(time.monotonic() - since, 2)


def _settle(deployment: Deployment, producer: Producing, phases: list[Phase]) -> dict[str, Any]:
    """Wait until every job the producer enqueued has run (or the deadline passed); the figures,
    each error and the longest stall placed in the phase it happened in.

    lost: enqueued, never run; duplicates: runs beyond the first per job."""
    enqueued = set(producer.ids)
    records = deployment.records
    all_ran_s = _seconds_until(
        lambda: not enqueued - records.done_ids("deliver"), producer.stopped_at, "every enqueued job to run"
    )

    # A job leaves the stream when it is acknowledged: once the stream is empty, no job whose
    # acknowledgement was lost is left to run again, so the duplicates are final.
    def empty() -> bool:
        return int(stream_info(deployment.cluster, JOB_STREAM)["state"]["messages"]) == 0

    empty_s = _seconds_until(empty, producer.stopped_at, f"stream {JOB_STREAM} to be empty")
    runs = records.counts("done", "deliver")
    stall_began, stall = producer.longest_stall()
    stall_during = _during(phases, stall_began, stall_began + stall)
    return {
        "enqueued": len(enqueued),
        "enqueue_errors": len(producer.errors),
        "first_errors": [f"{_during(phases, at)}: {error}" for at, error in producer.errors[:3]],
        "longest_enqueue_stall_s": round(stall, 2),
        "longest_stall_during": stall_during,
        "slowest_enqueue_s": round(producer.slowest, 2),
        "lost": len(enqueued - set(runs)),
        "duplicates": sum(n - 1 for job_id, n in runs.items() if job_id in enqueued),
        "all_ran_after_last_enqueue_s": all_ran_s,
        "stream_empty_after_last_enqueue_s": empty_s,
    }


def _assert_nothing_lost(deployment: Deployment, figures: dict[str, Any]) -> None:
    for worker in deployment.workers:
        tail = worker.log.read_text(errors="replace")[-3000:]
        assert worker.proc.poll() is None, f"a worker exited:\n{tail}"
    assert figures["enqueue_errors"] == 0, f"enqueues failed: {figures['first_errors']}"
    assert figures["lost"] == 0, f"{figures['lost']} of {figures['enqueued']} enqueued jobs never ran"


# --- the cluster ------------------------------------------------------------------------------


def _not_whole(cluster: Secured) -> list[str]:
    """What keeps the cluster from being whole (empty when it is): every node up, healthy (its
    /healthz checks that its JetStream streams and consumers are current), one meta leader for
    all three, and every stream with a leader and every replica current."""
    problems = []
    for name, node in cluster.nodes.items():
        if not node.running:
            problems.append(f"{name} is down")
            continue
        status = http_status(f"{node.monitoring_url}/healthz")
        if status != 200:
            problems.append(f"{name} /healthz {status}")
    if not meta_leader(list(cluster.nodes.values())):
        problems.append("no meta leader all nodes agree on")
    for stream in STREAMS:
        try:
            info = stream_info(cluster, stream)
        except UNSETTLED as exc:
            problems.append(f"{stream}: {exc!r}")
            continue
        if "error" in info:
            problems.append(f"{stream}: {info['error']}")
            continue
        group = info.get("cluster") or {}
        if not group.get("leader"):
            problems.append(f"{stream}: no leader")
        for peer in group.get("replicas") or []:
            if peer.get("offline") or not peer.get("current"):
                problems.append(f"{stream}: replica {peer.get('name')} not current")
    return problems


def _wait_whole(cluster: Secured) -> None:
    wait_until(
        lambda: _not_whole(cluster),
        until=lambda problems: not problems,
        timeout=WHOLE_TIMEOUT,
        interval=0.5,
        message="the cluster to be whole",
    )


def _make_whole(cluster: Secured) -> None:
    """Start any node a failed test left down, then wait until the cluster is whole."""
    for node in cluster.nodes.values():
        if not node.running:
            node.restart(timeout=30)
    _wait_whole(cluster)


def _roles(cluster: Secured) -> dict[str, list[str]]:
    """node -> what it leads: the JetStream meta group, the job stream."""
    roles: dict[str, list[str]] = {name: [] for name in cluster.nodes}
    jsz = next(node.jsz() for node in cluster.nodes.values() if node.running)
    meta = ((jsz or {}).get("meta_cluster") or {}).get("leader")
    if meta in roles:
        roles[meta].append("meta leader")
    leader = (stream_info(cluster, JOB_STREAM).get("cluster") or {}).get("leader")
    if leader in roles:
        roles[leader].append("job stream leader")
    return roles


# --- Prometheus -------------------------------------------------------------------------------


def _scraped(prometheus: PrometheusAPI) -> set[str]:
    """The worker targets Prometheus has scraped successfully."""
    return {r["metric"]["instance"] for r in prometheus.result('up{job="jsworker"} == 1')}


def _rules(prometheus: PrometheusAPI) -> list[dict[str, Any]]:
    return [rule for group in prometheus.api("rules")["data"]["groups"] for rule in group["rules"]]


def _mix(tasks: ProducerTasks) -> Callable[[int], Job]:
    """Jobs of every outcome, in turn: success, a retry then success, a timeout and a failure
    (both dead-lettered), and a delayed job the server fires a second later."""
    cycle: list[Callable[[int], Job]] = [
        tasks.deliver.delay,
        tasks.deliver.delay,
        tasks.flaky.delay,
        tasks.slow.delay,
        tasks.doomed.delay,
        lambda n: tasks.flaky.apply((n,), countdown=1.0),
    ]
    return lambda n: cycle[n % len(cycle)](n)


def _until_none_left(
    deployment: Deployment, missing: Callable[[], list[str]], timeout: float, what: str
) -> None:
    """Wait until ``missing`` lists nothing, while jobs of every outcome run (dead letters
    among them, so their series exist whichever of the module's tests ran before)."""
    with Producing(_mix(deployment.tasks), rate=10):
        wait_until(missing, until=lambda left: not left, timeout=timeout, interval=1, message=what)


# --- the tests --------------------------------------------------------------------------------


def test_every_stream_has_three_replicas(deployment: Deployment) -> None:
    """The streams the workers create, as compose's worker environment configures them, are
    replicated on all three nodes: losing one node (or its volume) loses no job."""
    wrong = {}
    for stream in STREAMS:
        info = wait_until(
            lambda stream=stream: stream_info(deployment.cluster, stream),  # type: ignore[misc]
            until=lambda answer: "config" in answer,
            timeout=30,
            ignore=UNSETTLED,
            message=f"stream {stream}",
        )
        group = info.get("cluster") or {}
        placed = {group.get("leader")} | {peer["name"] for peer in group.get("replicas") or []}
        if info["config"]["num_replicas"] != 3 or placed != set(NODES):
            wrong[stream] = {"num_replicas": info["config"]["num_replicas"], "on": sorted(map(str, placed))}
    assert not wrong, (
        f"streams not replicated on all three nodes: {wrong}; compose's worker environment "
        "should give JSWORKER_REPLICAS: 3"
    )


def test_first_dead_letter_sets_off_the_alert(deployment: Deployment) -> None:
    """The deployment's very first dead letter makes JsworkerDeadLettersArriving active: the
    counter must have had a sample (of 0) before the dead letter, or increase() sees nothing."""
    prometheus, cluster = deployment.prometheus, deployment.cluster
    # A sample of everything the workers export, taken before the dead letter.
    wait_until(
        lambda: _scraped(prometheus),
        until=lambda up: len(up) == WORKERS,
        timeout=4 * _interval("scrape_interval"),
        interval=0.5,
        message="prometheus to scrape both workers",
    )
    stored = stream_info(cluster, DLQ_STREAM)["state"]["messages"]
    assert stored == 0, f"this test needs the deployment's first dead letter, {stored} are stored"

    deployment.tasks.doomed.delay(0)
    wait_until(
        lambda: stream_info(cluster, DLQ_STREAM)["state"]["messages"],
        until=lambda n: n == 1,
        timeout=30,
        ignore=UNSETTLED,
        message="the dead letter to be stored",
    )
    stored_at = time.monotonic()
    counter = 'jsworker_jobs_dead_lettered_total{task="doomed"}'
    wait_until(
        lambda: prometheus.result(f"{counter} >= 1"),
        timeout=3 * _interval("scrape_interval"),
        interval=0.5,
        message="prometheus to scrape the dead-letter count",
    )
    alert = f'ALERTS{{alertname="{DEAD_LETTER_ALERT}", task="doomed"}}'
    try:
        # Two evaluations after the scrape: the rule's first look at the new sample, and one more.
        active = wait_until(
            lambda: prometheus.result(alert),
            timeout=2 * _interval("evaluation_interval") + 5,
            interval=0.5,
            message=f"{DEAD_LETTER_ALERT} to be pending or firing",
        )
    except AssertionError as exc:
        history = prometheus.result(f"{counter}[15m]")
        samples = [[float(v) for _, v in series["values"]] for series in history]
        raise AssertionError(
            f"{DEAD_LETTER_ALERT} not active after the first dead letter. The counter's samples in "
            f"Prometheus: {samples}. Without a sample of 0 before the 1, increase() has nothing to "
            "compare with: the counter must exist at 0 from the worker's start."
        ) from exc
    _figures(
        scenario="first dead letter",
        alert_states=sorted({a["metric"]["alertstate"] for a in active}),
        alert_after_dead_letter_s=round(time.monotonic() - stored_at, 1),
    )


@pytest.mark.timeout(420)
def test_kill_9_of_a_leader_loses_no_job(deployment: Deployment) -> None:
    """A node that leads the job stream (the meta leader too, when one node is both) dies by
    SIGKILL while an application enqueues and workers run: no enqueue fails, every job runs.
    The node is started again on its store and the cluster becomes whole."""
    cluster = deployment.cluster
    _make_whole(cluster)
    roles = _roles(cluster)
    # The node with the most to lose: the job stream's leader, best if it is the meta leader too.
    target = max(roles, key=lambda name: ("job stream leader" in roles[name], len(roles[name])))
    node = cluster.nodes[target]
    with Producing(deployment.tasks.deliver.delay) as producer:
        producer.wait_for(int(RATE), producer.started_at, "before the kill")
        killed_at = time.monotonic()
        node.kill()
        survivors = [name for name in cluster.nodes if name != target]

        def new_leader() -> str | None:
            leader = (stream_info(cluster, JOB_STREAM, survivors).get("cluster") or {}).get("leader")
            return leader if leader != target else None

        try:
            elected: str | None = wait_until(new_leader, timeout=30, interval=0.2, ignore=UNSETTLED)
            elected_s: float | None = round(time.monotonic() - killed_at, 2)
        except AssertionError:
            elected, elected_s = None, None  # asserted below, after the figures
        # Through the failover and on while the node is down; if enqueues stop (an R1 stream
        # lived on that node), the figures say so.
        went_on = producer.went_on(int(5 * RATE), killed_at, timeout=30)
        restarted_at = time.monotonic()
        node.restart(timeout=30)
        _wait_whole(cluster)
        whole_at = time.monotonic()
        producer.wait_for(int(2 * RATE), whole_at, "with the cluster whole again")
    phases = [(f"{target} down", killed_at, restarted_at), (f"{target} catching up", restarted_at, whole_at)]
    figures = _settle(deployment, producer, phases)
    _figures(
        scenario="kill -9",
        node=target,
        roles=roles[target],
        new_job_stream_leader=elected,
        new_leader_s=elected_s,
        enqueued_while_down=producer.since(killed_at) - producer.since(restarted_at),
        whole_after_restart_s=round(whole_at - restarted_at, 2),
        **figures,
    )
    _assert_nothing_lost(deployment, figures)
    assert elected is not None, f"no node took over the job stream from {target}"
    assert went_on, f"enqueues stopped with {target} down"


@pytest.mark.timeout(600)
def test_rolling_restart_with_lame_duck_loses_no_job(deployment: Deployment) -> None:
    """Each node in turn is stopped as compose stops it (SIGUSR2: lame duck mode), exits by
    itself, is started again on its store and catches up before the next one goes, while an
    application enqueues and workers run: no enqueue fails, every job runs."""
    cluster = deployment.cluster
    _make_whole(cluster)
    # Compose kills a node that has not exited after its stop_grace_period.
    grace = seconds(load_compose()["services"]["nats-1"]["stop_grace_period"])
    assert load_compose()["services"]["nats-1"]["stop_signal"] == "SIGUSR2"
    steps: list[dict[str, Any]] = []
    phases: list[Phase] = []
    with Producing(deployment.tasks.deliver.delay) as producer:
        producer.wait_for(int(RATE), producer.started_at, "before the restarts")
        for name in NODES:
            node = cluster.nodes[name]
            roles = _roles(cluster)[name]
            signalled_at = time.monotonic()
            pid = node.pid
            assert pid is not None, f"{name} is not running"
            os.kill(pid, signal.SIGUSR2)  # our own child, not yet reaped: the pid is still its
            wait_until(
                lambda node=node: not node.running,  # type: ignore[misc]
                timeout=grace,
                interval=0.2,
                message=f"{name} to exit by itself in lame duck mode",
            )
            exited_at = time.monotonic()
            node.restart(timeout=30)
            _wait_whole(cluster)
            whole_at = time.monotonic()
            phases += [(f"{name} lame duck", signalled_at, exited_at), (f"{name} back", exited_at, whole_at)]
            steps.append(
                {
                    "node": name,
                    "roles": roles,
                    "exit_after_sigusr2_s": round(exited_at - signalled_at, 2),
                    "whole_after_start_s": round(whole_at - exited_at, 2),
                }
            )
        producer.wait_for(int(2 * RATE), time.monotonic(), "after the last restart")
    figures = _settle(deployment, producer, phases)
    _figures(scenario="rolling restart with lame duck", nodes=steps, **figures)
    _assert_nothing_lost(deployment, figures)


def test_every_dashboard_query_returns_data(deployment: Deployment) -> None:
    """With jobs of every outcome running, every query of the dashboard (as Grafana sends it with
    every queue and task selected) returns a number for the deployment's two workers; those of
    MAY_BE_EMPTY at least parse."""
    prometheus = deployment.prometheus

    def without_data() -> list[str]:
        empty = []
        for title, ref, expr in dashboard_targets():
            result = prometheus.result(concrete(expr))
            if (title, ref) in MAY_BE_EMPTY:
                continue
            if not result or any(r["value"][1] == "NaN" for r in result):
                empty.append(f"{title}/{ref}")
        return empty

    _until_none_left(
        deployment, without_data, 8 * _interval("scrape_interval"), "every dashboard query to return data"
    )
    (up,) = [expr for title, _, expr in dashboard_targets() if title == "Workers up"]
    assert [float(r["value"][1]) for r in prometheus.result(concrete(up))] == [WORKERS]


# A series of a feature the deployed quickstart app does not use: nothing makes it there (its
# rule's logic is unit-tested in tests/ops/alerts_test.yml).
UNUSED_BY_QUICKSTART = {"jsworker_schedules_restored_total": "the quickstart declares no periodic schedule"}


def test_alert_rules_evaluate_and_the_series_they_use_exist(deployment: Deployment) -> None:
    """Every rule of alerts.yml is loaded and evaluates without error, and every series its
    expression selects exists in the deployment's Prometheus (the rule is not silently empty)."""
    prometheus = deployment.prometheus
    assert {rule["name"] for rule in _rules(prometheus)} == {rule["alert"] for rule in alert_rules()}
    used = sorted(
        {
            f"{name}{matchers}"
            for rule in alert_rules()
            for name, matchers in selectors(rule["expr"])
            if name not in UNUSED_BY_QUICKSTART
        }
    )

    def not_yet() -> list[str]:
        waiting = [
            f"{rule['name']}: {rule['health']} {rule.get('lastError', '')}"
            for rule in _rules(prometheus)
            if rule["health"] != "ok" or rule["lastEvaluation"].startswith("0001")
        ]
        return waiting + [f"no series {s}" for s in used if not prometheus.result(f"count({s})")]

    _until_none_left(
        deployment,
        not_yet,
        6 * _interval("evaluation_interval"),
        "every rule evaluated and every series it uses present",
    )
