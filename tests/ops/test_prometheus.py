"""The dashboard's and the alerts' queries on a real Prometheus scraping a real worker.

One module-wide scenario: a nats-server, ``jsworker run`` of tests/ops/apps/ops_app.py with
``--metrics-port``, and Debian's Prometheus (our own process, on a free loopback port, with a
temporary store) scraping the worker every second and evaluating deploy/prometheus/alerts.yml.
Two rounds of jobs with every outcome run while it scrapes, so counters exist before they grow
and every rate is non-zero. Each round also has delayed jobs: two the worker itself schedules
(cancelling one), one the server fires twice and one whose firing a cancel has already claimed,
so the Schedules row has scheduled, fired, cancelled and dropped jobs to show. Then every
dashboard query must parse and return data, and every alert rule must evaluate without error,
the ones this job mix triggers firing.

Also: promtool checks of the rule file and the compose prometheus.yml, and promtool's unit tests
of the alert logic (tests/ops/alerts_test.yml).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jsworker import Job
from jsworker._scheduling.claims import CANCELLED, claim
from jsworker._scheduling.delayed import due_ms
from jsworker.testing import NatsServer

from .. import launcher
from ..integration.workers import Samples, scrape, start_metrics_worker, stop, value
from ..support import connected, made_schedule, wait_until
from .live import PROMETHEUS, PROMTOOL, PrometheusAPI, binary, start_prometheus
from .opsfiles import (
    ALERTS,
    APPS,
    PROMETHEUS_YML,
    ROOT,
    concrete,
    dashboard_targets,
    variable_queries,
)

sys.path.insert(0, str(APPS))
import ops_app

HERE = Path(__file__).resolve().parent

# Dashboard targets that may return no data in this test, with the reason. Empty so far: the job
# mix produces every outcome, and the pull-loop counters exist (at 0) from the worker's start.
MAY_BE_EMPTY: dict[tuple[str, str], str] = {
    ("Starts held back by limits", "A"): "the ops app declares no rate limit",
    ("Starts held back by limits", "B"): "the ops app declares no per-partition limit",
    ("Fair queues: waiting their turn", "A"): "the ops app declares no fair queue",
    ("Fair queues: waiting their turn", "B"): "the ops app declares no fair queue",
}

# Alerts this scenario must set off: it dead-letters jobs and blocks the event loop (no `for`).
MUST_FIRE = {"JsworkerDeadLettersArriving", "JsworkerEventLoopBlocked"}


# --- promtool ---------------------------------------------------------------------------------


def _promtool(*args: str) -> None:
    result = subprocess.run([binary(PROMTOOL), *args], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0, f"promtool {' '.join(args)}:\n{result.stdout}{result.stderr}"


def test_promtool_accepts_the_alert_rules() -> None:
    _promtool("check", "rules", str(ALERTS))


def test_promtool_accepts_the_compose_prometheus_config() -> None:
    _promtool("check", "config", str(PROMETHEUS_YML))


def test_alert_rules_pass_their_unit_tests() -> None:
    """Synthetic series through the real rule engine: who fires, when, with which text."""
    _promtool("test", "rules", str(HERE / "alerts_test.yml"))


# --- the live scenario ------------------------------------------------------------------------


@dataclass
class Live(PrometheusAPI):
    worker_port: int
    worker_samples: Samples  # the worker's /metrics at the end of the scenario


def _prometheus_config(path: Path, worker_port: int) -> None:
    # JSON is YAML: no YAML library needed to write it.
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [
            {"job_name": "jsworker", "static_configs": [{"targets": [f"127.0.0.1:{worker_port}"]}]}
        ],
    }
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")


# Seconds ahead the test's own delayed jobs are due: time to copy one's schedule and claim the
# other's firing before the server fires them.
DUE_IN = 1.5


def _round(url: str) -> None:
    """Each task once: every outcome the dashboard shows. Then the two firings a worker drops."""
    ops_app.ok.delay()
    ops_app.report.delay()
    ops_app.flaky.delay()
    ops_app.slow.delay()
    ops_app.refuse.delay()
    ops_app.broken.delay()
    ops_app.blocker.delay()
    ops_app.plan.delay()
    twice = ops_app.later.apply(countdown=DUE_IN)
    doomed = ops_app.later.apply(countdown=DUE_IN)
    asyncio.run(_store_a_second_schedule(url, twice))
    holder = ops_app.app.bridge.run_sync(_claim_as_cancelled, doomed)
    assert holder is None, f"{doomed.id} fired and was claimed by {holder} before the test's claim"


async def _store_a_second_schedule(url: str, job: Job) -> None:
    """The server fires ``job`` twice: its schedule stored again under a second subject (the
    doubled firing of tests/integration/test_delayed_jobs.py)."""
    assert job.scheduled_for is not None
    due = due_ms(job.scheduled_for)
    ns = ops_app.app.namespace
    async with connected(url) as nc:
        js = nc.jetstream()
        original = await made_schedule(nc, ns, "default", due, job.id)
        headers = dict(original.headers or {})
        headers.pop("Nats-Msg-Id")  # else the copy is dropped as a duplicate publish
        await js.publish(ns.delayed_subject("copy", due, job.id), original.data or b"", headers=headers)


async def _claim_as_cancelled(job: Job) -> str | None:
    """What a cancel racing the server's firing leaves: the firing claimed as cancelled while
    the schedule still fires. None when the claim is the cancel's."""
    assert job.scheduled_for is not None
    conn = await ops_app.app.producer.connection()
    return await claim(conn, ops_app.app.namespace, job.id, due_ms(job.scheduled_for), CANCELLED)


def _settled(samples: Samples, n: int) -> bool:
    """True once the worker has finished ``n`` rounds (and reports the job due after the end)."""
    succeeded = "jsworker_jobs_succeeded_total"
    dead = "jsworker_jobs_dead_lettered_total"
    dropped = "jsworker_fired_dropped_total"
    d = {"queue": "default"}
    return (
        all(
            value(samples, succeeded, queue=q, task=t) == n
            for q, t in (
                ("default", "ok"),
                ("reports", "report"),
                ("default", "flaky"),
                ("default", "blocker"),
                ("default", "plan"),
            )
        )
        and value(samples, dead, **d, task="slow", outcome="timed_out") == n
        and value(samples, dead, **d, task="refuse", outcome="rejected") == n
        and value(samples, dead, **d, task="broken", outcome="failed") == n
        # plan's delayed job and the one fired twice; not the one claimed as cancelled.
        and value(samples, succeeded, **d, task="later") == 2 * n
        and value(samples, dropped, **d, task="later", reason="duplicate") == n
        and value(samples, dropped, **d, task="later", reason="cancelled") == n
        and value(samples, "jsworker_queue_delayed", **d) >= 1
        and value(samples, "jsworker_jobs_in_flight") == 0
    )


def _settled_now(worker_port: int, n: int) -> bool:
    return _settled(scrape(worker_port), n)


def _scrapes_since(live: Live, seen: int, more: int) -> bool:
    return _scrapes(live) >= seen + more


def _scrapes(live: Live) -> int:
    """Samples Prometheus holds of the worker's `up` over the last 5 minutes: a scrape count."""
    result = live.query('count_over_time(up{job="jsworker"}[5m])')["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0


@pytest.fixture(scope="module")
def live(nats_server_module: NatsServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    binary(PROMETHEUS)  # skip (or fail on CI) before starting anything
    tmp = tmp_path_factory.mktemp("ops-prometheus")
    env = dict(os.environ)
    env["JSWORKER_URL"] = nats_server_module.url
    env["PYTHONPATH"] = os.pathsep.join([str(APPS), str(ROOT), env.get("PYTHONPATH", "")])
    env.pop("JSWORKER_METRICS_PORT", None)
    worker_log, prom_log = tmp / "worker.log", tmp / "prometheus.log"
    procs: list[launcher.Process] = []
    app = ops_app.app
    app.servers = [nats_server_module.url]
    try:
        worker, worker_port = start_metrics_worker(
            env, worker_log, "ops_app", "-c", "8", "--grace", "5", "--log-level", "warning"
        )
        procs.append(worker)
        config = tmp / "prometheus.yml"
        _prometheus_config(config, worker_port)
        api = start_prometheus(config, tmp / "data", prom_log, procs)
        state = Live(api.prometheus, worker_port, {})

        wait_until(lambda: _scrapes(state) >= 2, timeout=20, message="prometheus to scrape the worker")
        # Due long after the scenario: Delayed jobs waiting has a job to show, not only a 0.
        ops_app.later.apply(countdown=3600)
        for n in (1, 2):
            # Round 1 creates every (queue, task) series; round 2 makes them grow while scraped.
            _round(nats_server_module.url)
            wait_until(
                functools.partial(_settled_now, worker_port, n),
                timeout=30,
                message=f"round {n} of jobs to settle",
            )
            wait_until(
                functools.partial(_scrapes_since, state, _scrapes(state), 3),
                timeout=20,
                message="three more scrapes",
            )
        state.worker_samples = scrape(worker_port)
        yield state
    finally:
        for proc in reversed(procs):
            stop(proc)
        app.close()


# --- the dashboard's queries ------------------------------------------------------------------


def _target_params() -> list[Any]:
    return [pytest.param(title, ref, expr, id=f"{title}/{ref}") for title, ref, expr in dashboard_targets()]


@pytest.mark.parametrize(("title", "ref", "expr"), _target_params())
def test_dashboard_query_returns_data(live: Live, title: str, ref: str, expr: str) -> None:
    query = concrete(expr)
    answer = live.query(query)
    assert answer["status"] == "success", f"{title}/{ref}: {query}\n{answer}"
    result = answer["data"]["result"]
    if (title, ref) in MAY_BE_EMPTY:
        return
    assert result, f"{title}/{ref} returned no data: {query}"
    assert all(r["value"][1] != "NaN" for r in result), f"{title}/{ref}: NaN in {result}"


def test_workers_up_counts_the_worker(live: Live) -> None:
    (expr,) = [e for t, _, e in dashboard_targets() if t == "Workers up"]
    (result,) = live.query(concrete(expr))["data"]["result"]
    assert float(result["value"][1]) == 1


def test_delayed_jobs_waiting_shows_the_job_not_due_yet(live: Live) -> None:
    (expr,) = [e for t, _, e in dashboard_targets() if t == "Delayed jobs waiting"]
    result = live.query(concrete(expr))["data"]["result"]
    by_queue = {r["metric"]["queue"]: float(r["value"][1]) for r in result}
    # At least: the last read of the server's figures may predate the last round's firings.
    assert by_queue["default"] >= 1
    assert by_queue["reports"] == 0


def test_variable_queries_list_the_queues_and_tasks(live: Live) -> None:
    """label_values(metric, label) is Grafana's; Prometheus answers it as a label-values call."""
    expected = {
        "queue": {"default", "reports"},
        "task": {"ok", "report", "flaky", "slow", "refuse", "broken"},
    }
    for name, query in variable_queries().items():
        metric, label = query.removeprefix("label_values(").removesuffix(")").rsplit(", ", 1)
        answer = live.api(f"label/{label}/values", **{"match[]": concrete(metric)})
        assert answer["status"] == "success", answer
        assert expected[name] <= set(answer["data"]), (name, answer["data"])


# --- the alert rules --------------------------------------------------------------------------


def _rules(live: Live) -> list[dict[str, Any]]:
    groups = live.api("rules")["data"]["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_alert_rules_load_and_evaluate_without_errors(live: Live) -> None:
    rules = _rules(live)
    assert {r["name"] for r in rules} >= MUST_FIRE
    # A rule never evaluated shows the zero time.
    wait_until(
        lambda: not any(r["lastEvaluation"].startswith("0001") for r in _rules(live)),
        timeout=10,
        message="an evaluation",
    )
    for rule in _rules(live):
        assert rule["health"] == "ok", f"{rule['name']}: {rule.get('lastError')}"
        answer = live.query(rule["query"])
        assert answer["status"] == "success", f"{rule['name']}: {answer}"


def test_alerts_fire_for_what_the_jobs_did(live: Live) -> None:
    def firing() -> set[str]:
        alerts = live.api("alerts")["data"]["alerts"]
        return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}

    wait_until(firing, until=lambda names: names >= MUST_FIRE, timeout=15, message=f"{MUST_FIRE} to fire")
    alerts = live.api("alerts")["data"]["alerts"]
    dead = {
        (a["labels"]["task"], a["labels"]["outcome"])
        for a in alerts
        if a["labels"]["alertname"] == "JsworkerDeadLettersArriving"
    }
    assert dead == {("slow", "timed_out"), ("refuse", "rejected"), ("broken", "failed")}
    # Nothing in this scenario justifies the others.
    assert not firing() - MUST_FIRE


def test_worker_reported_the_job_mix(live: Live) -> None:
    """The worker's own counts: the outcomes the queries above were run on."""
    s = live.worker_samples
    d = {"queue": "default"}
    assert value(s, "jsworker_jobs_failed_total", **d, task="flaky") == 2
    assert value(s, "jsworker_jobs_retried_total", **d, task="flaky") == 2
    assert value(s, "jsworker_jobs_timed_out_total", **d, task="slow") == 2
    assert value(s, "jsworker_event_loop_blocked_total") >= 2
    # Schedules: plan stored 2 delayed jobs a round and cancelled 1; 2 a round fired and ran.
    assert value(s, "jsworker_jobs_scheduled_total", **d, task="later") == 4
    assert value(s, "jsworker_jobs_cancelled_total", **d, task="later") == 2
    assert value(s, "jsworker_jobs_fired_total", **d, task="later", kind="delayed") == 4
