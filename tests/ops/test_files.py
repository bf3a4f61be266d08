"""The dashboard, alert rules and deployment files, checked against the code (no servers).

Metric names are checked against the Metrics class, worker options against ``jsworker run``,
ports and grace periods across files. tests/ops/test_prometheus.py runs the queries for real.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from jsworker._config import parse_size
from jsworker._server import ServerNotFoundError, find_nats_server

from ..support import need
from .opsfiles import (
    ALERTS,
    AUTH_CONF,
    COMPOSE,
    COMPOSE_TLS_NAMES,
    DEPLOY,
    DOCKERFILE,
    K8S,
    K8S_TLS_NAMES,
    PROMETHEUS_YML,
    ROOT,
    alert_rules,
    compose_nats_files,
    copy_configs,
    dashboard,
    dashboard_targets,
    dockerfile_instruction,
    family_of,
    image_run_args,
    k8s_nats_files,
    k8s_object,
    k8s_objects,
    known_sample_names,
    load_yaml,
    made_up_passwords,
    metric_families,
    metric_names,
    options_in,
    panels,
    parse_run,
    password_variables,
    run_help_options,
    seconds,
    selectors,
    strings_in,
    strip_conf_comments,
    variable_queries,
)

# Where compose mounts deploy/nats in the nats containers (the TLS files go beside it, in
# /etc/nats/tls: a mount inside a read-only mount would need a mount point Docker cannot make).
NATS_CONFIG_DIR = "/etc/nats/config"

ALERT_NAMES = {
    "JsworkerBacklogGrowing",
    "JsworkerDeadLettersArriving",
    "JsworkerEnqueueFailing",
    "JsworkerHeartbeatsMissed",
    "JsworkerNoWorkerOnQueue",
    "JsworkerQueueUnreachable",
    "JsworkerEventLoopBlocked",
    "JsworkerQueuePaused",
    "JsworkerScheduleRestored",
    "JsworkerJobsRestored",
    "JsworkerForgeryRefused",
}


# --- metric names -----------------------------------------------------------------------------


def test_metric_name_extraction_sees_metrics_and_nothing_else() -> None:
    """The checks below are only as good as this parser: it must find a wrong name anywhere."""
    expr = (
        "histogram_quantile(0.95, sum by (le, queue) (rate(jsworker_job_duration_seconds_bucket"
        '{queue=~"$queue", task=~"a|b"}[$__rate_interval])))'
        " > on (queue) group_left () max by (queue) (oops_metric)"
        " or vector(0) unless count without (task) (up offset 5m)"
    )
    assert metric_names(expr) == {"jsworker_job_duration_seconds_bucket", "oops_metric", "up"}
    assert metric_names("label_values(jsworker_pull_requests_total{x='y'}, queue)") == {
        "jsworker_pull_requests_total"
    }
    assert "jsworker_jobs_started" not in known_sample_names()  # counters only with _total


def _exprs_everywhere() -> list[tuple[str, str]]:
    found = [(f"dashboard {title}/{ref}", expr) for title, ref, expr in dashboard_targets()]
    found += [(f"dashboard variable {name}", query) for name, query in variable_queries().items()]
    found += [(f"alert {rule.get('alert', rule.get('record'))}", rule["expr"]) for rule in alert_rules()]
    return found


def test_every_metric_used_exists_in_the_metrics_module() -> None:
    known = known_sample_names()
    unknown = [
        (where, name)
        for where, expr in _exprs_everywhere()
        for name in metric_names(expr)
        if name not in known
    ]
    # prometheus.yml has no expressions; any metric name in it (relabelling, say) must exist too.
    config = load_yaml(PROMETHEUS_YML)
    unknown += [
        ("prometheus.yml", name)
        for text in strings_in(config)
        for name in re.findall(r"\bjsworker_[a-zA-Z0-9_]+", text)
        if name not in known
    ]
    assert not unknown, f"metric names not defined in jsworker/_observability/metrics.py: {unknown}"


# --- the dashboard ----------------------------------------------------------------------------


def test_dashboard_has_the_datasource_queue_and_task_variables() -> None:
    board = dashboard()
    assert board["schemaVersion"] >= 38
    assert board["uid"] == "jsworker" and board["title"] == "jsworker"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    queries = variable_queries()
    for name in ("queue", "task"):
        var = variables[name]
        assert var["type"] == "query"
        assert var["datasource"]["uid"] == "${datasource}"
        assert re.fullmatch(r"label_values\(.+, " + name + r"\)", queries[name]), queries[name]
        # "All" must become a regex that matches every value, since panels use =~"$var".
        assert var["includeAll"] and var["multi"] and var["allValue"] == ".*"
    assert "$queue" in queries["task"], "the task list should follow the selected queues"


def test_every_panel_queries_prometheus_through_the_datasource_variable() -> None:
    board = dashboard()
    ids = [p["id"] for p in board["panels"]] + [c["id"] for p in board["panels"] for c in p.get("panels", [])]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels(board):
        targets = panel.get("targets", [])
        assert any(t.get("expr") for t in targets), f"panel {panel['title']!r} has no query"
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        refs = [t["refId"] for t in targets]
        assert len(refs) == len(set(refs)), f"duplicate refIds in {panel['title']!r}"
        for target in targets:
            assert target["datasource"]["uid"] == "${datasource}", (panel["title"], target["refId"])


def test_panels_do_not_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in dashboard()["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, f"{panel['title']!r} is wider than the dashboard"
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]


def test_queries_filter_on_the_queue_and_task_variables() -> None:
    """Every selector of a metric with a queue (task) label filters it with $queue ($task)."""
    families = metric_families()
    for title, ref, expr in dashboard_targets():
        for name, matchers in selectors(expr):
            labels = families[family_of(name)][1]
            for label in ("queue", "task"):
                if label in labels:
                    assert f'{label}=~"${label}"' in matchers, (
                        f"{title}/{ref}: {name} not filtered by ${label}"
                    )
            if name == "jsworker_worker_info" and "queues" in matchers:
                assert "$queue" in matchers, f"{title}/{ref}"


def _panel(title: str) -> dict[str, Any]:
    found = [p for p in panels() if p["title"] == title]
    assert len(found) == 1, f"expected one panel {title!r}"
    return found[0]


def _exprs(title: str) -> list[str]:
    return [t["expr"] for t in _panel(title)["targets"]]


def test_dashboard_has_the_panels_operators_need() -> None:
    throughput = " ".join(_exprs("Throughput by outcome"))
    for outcome in ("started", "succeeded", "failed", "retried", "dead_lettered", "timed_out"):
        assert f"rate(jsworker_jobs_{outcome}_total" in throughput, outcome
    for title, metric in (
        ("Job duration", "jsworker_job_duration_seconds"),
        ("Queue wait", "jsworker_job_queue_wait_seconds"),
    ):
        exprs = _exprs(title)
        for q, expr in zip(("0.5", "0.95", "0.99"), exprs, strict=True):
            assert expr.startswith(f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket"), expr
    backlog = " ".join(_exprs("Backlog and dead letters"))
    assert "jsworker_queue_pending" in backlog and "jsworker_dead_letters" in backlog
    in_flight = " ".join(_exprs("In flight vs concurrency limit"))
    assert "jsworker_jobs_in_flight" in in_flight and "jsworker_concurrency_limit" in in_flight
    by_outcome = " ".join(_exprs("Retries and dead letters by outcome"))
    assert "jsworker_jobs_retried_total" in by_outcome and "sum by (outcome)" in by_outcome
    pull = " ".join(_exprs("Pull requests") + _exprs("Pull-loop incidents"))
    for metric in (
        "jsworker_pull_requests_total",
        "jsworker_pull_heartbeats_missed_total",
        "jsworker_pull_restarts_total",
        "jsworker_reconnects_total",
        "jsworker_event_loop_blocked_total",
    ):
        assert metric in pull, metric
    assert _exprs("Workers up")[0].startswith("count(jsworker_worker_info")
    assert _panel("Workers up")["type"] == "stat"


SCHEDULE_PANELS = [
    "Jobs scheduled, fired, cancelled and expired",
    "Fired jobs dropped unrun",
    "Delayed jobs waiting",
]


def test_dashboard_has_a_schedules_row() -> None:
    """Its panels right under the row (Grafana groups a row's panels by position) and what each
    must show: rates of the schedule counters, drops by reason, the per-queue gauge as a max."""
    board = dashboard()
    (row,) = [p for p in board["panels"] if p["title"] == "Schedules"]
    assert row["type"] == "row"
    below = [p for p in board["panels"] if p["gridPos"]["y"] == row["gridPos"]["y"] + 1]
    assert sorted(p["title"] for p in below) == sorted(SCHEDULE_PANELS)
    rates = _exprs(SCHEDULE_PANELS[0])
    for metric, by in (
        ("jsworker_jobs_scheduled_total", "queue"),
        ("jsworker_jobs_fired_total", "queue, kind"),
        ("jsworker_jobs_cancelled_total", "queue"),
        ("jsworker_jobs_expired_total", "queue"),
    ):
        assert any(e.startswith(f"sum by ({by}) (rate({metric}{{") for e in rates), metric
    (dropped,) = _exprs("Fired jobs dropped unrun")
    assert dropped.startswith("sum by (queue, reason) (rate(jsworker_fired_dropped_total{")
    # Every worker on a queue reports the same figure: summing would multiply it.
    (waiting,) = _exprs("Delayed jobs waiting")
    assert waiting.startswith("max by (queue) (jsworker_queue_delayed{")
    for title in SCHEDULE_PANELS:
        assert _panel(title)["description"], title


FLOW_PANELS = ["Paused queues", "Starts held back by limits", "Jobs snoozed"]


def test_dashboard_has_a_flow_control_row() -> None:
    """Paused queues as the max every worker reports, starts held back by each limit, snoozes."""
    board = dashboard()
    (row,) = [p for p in board["panels"] if p["title"] == "Flow control"]
    assert row["type"] == "row"
    below = [p for p in board["panels"] if p["gridPos"]["y"] == row["gridPos"]["y"] + 1]
    assert sorted(p["title"] for p in below) == sorted(FLOW_PANELS)
    (paused,) = _exprs("Paused queues")
    assert paused.startswith("max by (queue) (jsworker_queue_paused{")
    held = " ".join(_exprs("Starts held back by limits"))
    assert "rate(jsworker_rate_limited_total" in held and "rate(jsworker_partition_waits_total" in held
    assert "rate(jsworker_jobs_snoozed_total" in _exprs("Jobs snoozed")[0]
    # Only a queue's mover knows its intake (the others report 0): the max is the figure.
    fair = _exprs("Fair queues: waiting their turn")
    assert [e.split("(")[0] for e in fair] == ["max by "] * 2
    assert "jsworker_fair_partitions_waiting" in fair[1]
    for title in [*FLOW_PANELS, "Fair queues: waiting their turn"]:
        assert _panel(title)["description"], title


# --- alert rules ------------------------------------------------------------------------------


def test_alert_rules_are_complete() -> None:
    rules = alert_rules()
    assert {r["alert"] for r in rules} == ALERT_NAMES
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        if "for" in rule:
            seconds(rule["for"])  # a valid duration
    by_name = {r["alert"]: r["expr"] for r in rules}
    assert re.search(r"(deriv|delta)\(jsworker_queue_pending\[10m\]\)", by_name["JsworkerBacklogGrowing"])
    assert "increase(jsworker_jobs_dead_lettered_total" in by_name["JsworkerDeadLettersArriving"]
    assert "increase(jsworker_pull_heartbeats_missed_total" in by_name["JsworkerHeartbeatsMissed"]
    assert "jsworker_event_loop_blocked_total" in by_name["JsworkerEventLoopBlocked"]
    assert "increase(jsworker_enqueue_failures_total" in by_name["JsworkerEnqueueFailing"]
    assert "jsworker_queue_reachable" in by_name["JsworkerQueueUnreachable"]
    assert "increase(jsworker_schedules_restored_total" in by_name["JsworkerScheduleRestored"]
    assert "increase(jsworker_jobs_restored_total" in by_name["JsworkerJobsRestored"]
    forged = by_name["JsworkerForgeryRefused"]
    assert "jsworker_questions_refused_total" in forged and "jsworker_workflow_forgeries_total" in forged


# --- compose ----------------------------------------------------------------------------------


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = load_yaml(COMPOSE)
    return data


def _mount(service: dict[str, Any], target: str) -> str:
    """The compose-relative source mounted at ``target``."""
    for volume in service.get("volumes", []):
        source, dest = volume.split(":")[:2]
        if dest == target:
            return str(source)
    raise AssertionError(f"nothing mounted at {target}")


def published(service: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """container port -> (host address, host port) of a service's published ports."""
    out = {}
    for port in service.get("ports", []):
        parts = str(port).split(":")
        assert len(parts) == 3, f"{port!r}: give the host address (127.0.0.1:HOST:CONTAINER)"
        out[parts[2]] = (parts[0], parts[1])
    return out


def test_compose_runs_a_three_node_jetstream_cluster() -> None:
    compose = _compose()
    services = compose["services"]
    names = [f"nats-{i}" for i in (1, 2, 3)]
    host_ports: set[str] = set()
    for name in names:
        svc = services[name]
        config = svc["command"][svc["command"].index("--config") + 1]
        source = DEPLOY / _mount(svc, NATS_CONFIG_DIR)
        conf = source / config.removeprefix(NATS_CONFIG_DIR + "/")
        assert conf.is_file(), conf
        text = conf.read_text(encoding="utf-8") + (source / "cluster.conf").read_text(encoding="utf-8")
        assert f"server_name: {name}" in text
        for other in names:
            assert f"nats-route://{other}:6222" in text, f"{conf.name} lacks a route to {other}"
        # Its JetStream store on its own named volume.
        assert "store_dir: /data/jetstream" in text
        assert _mount(svc, "/data") in compose["volumes"]
        ports = {container: host_port for container, (_, host_port) in published(svc).items()}
        assert set(ports) == {"4222", "8222"}, f"{name}: client and monitoring ports"
        assert not host_ports & set(ports.values())
        host_ports |= set(ports.values())
    assert len({_mount(services[n], "/data") for n in names}) == 3, "one store volume per node"


def _nats_server() -> str:
    try:
        return find_nats_server()
    except ServerNotFoundError as exc:
        need(False, str(exc))


def _nats_check(path: Path, env: dict[str, str] | None = None) -> None:
    """``nats-server -t``: the server's own parser (unknown keys are errors). It loads the TLS
    files and resolves every password variable, so both must exist: the configs are checked as
    copies pointing at dev certificates, with made-up passwords in the environment."""
    import os

    passwords = made_up_passwords(set(password_variables(AUTH_CONF.read_text(encoding="utf-8")).values()))
    result = subprocess.run(
        [_nats_server(), "-t", "-c", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **passwords, **(env or {})},
    )
    assert result.returncode == 0, f"{path}: {result.stdout}{result.stderr}"


@pytest.mark.parametrize("node", [1, 2, 3])
def test_compose_nats_configs_are_valid(node: int, dev_certs: Path, tmp_path: Path) -> None:
    configs = copy_configs(compose_nats_files(), tmp_path / "nats", dev_certs, COMPOSE_TLS_NAMES)
    _nats_check(configs / f"nats-{node}.conf")


def test_k8s_nats_config_is_valid_and_routes_to_every_pod(dev_certs: Path, tmp_path: Path) -> None:
    files = k8s_nats_files()
    config = files["nats.conf"]
    configs = copy_configs(files, tmp_path / "nats", dev_certs, K8S_TLS_NAMES)
    _nats_check(configs / "nats.conf", {"POD_NAME": "nats-0"})
    sts = k8s_object("StatefulSet", "nats")
    assert sts["spec"]["replicas"] == 3
    service = sts["spec"]["serviceName"]
    for i in range(3):
        assert f"nats-route://nats-{i}.{service}:6222" in config
    assert sts["spec"]["volumeClaimTemplates"], "JetStream needs persistent storage"


def _compose_worker_args() -> list[str]:
    worker = _compose()["services"]["worker"]
    return image_run_args(worker["command"], worker["environment"]["JSWORKER_APP"])


def _k8s_worker() -> tuple[dict[str, Any], dict[str, Any]]:
    deployment = k8s_object("Deployment", "jsworker")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return deployment, container


def _k8s_worker_args() -> list[str]:
    _, container = _k8s_worker()
    argv = container["command"] + container.get("args", [])
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    argv = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg) for arg in argv]
    return argv[argv.index("run") + 1 :]


def _worker_commands() -> dict[str, list[str]]:
    return {
        "compose": _compose_worker_args(),
        "image default": image_run_args(dockerfile_instruction("CMD"), "tasks"),
        "k8s": _k8s_worker_args(),
    }


def test_worker_commands_use_only_run_options() -> None:
    listed = run_help_options()
    for where, argv in _worker_commands().items():
        unknown = set(options_in(argv)) - listed
        assert not unknown, f"{where}: options that jsworker run --help does not list: {unknown}"
        params = parse_run(argv)  # and they parse, values included
        assert params["metrics_port"] == 9400, where
        assert params["app_spec"] == "tasks", where


def test_metrics_port_is_the_one_scraped() -> None:
    port = parse_run(_compose_worker_args())["metrics_port"]
    assert f"EXPOSE {port}" in DOCKERFILE.read_text(encoding="utf-8")
    (job,) = load_yaml(PROMETHEUS_YML)["scrape_configs"]
    (sd,) = job["dns_sd_configs"]
    assert sd["port"] == port
    assert sd["names"] == ["worker"], "the compose service of the workers"
    assert "worker" in _compose()["services"]
    assert str(port) in _compose()["services"]["worker"]["expose"]

    deployment, container = _k8s_worker()
    k8s_port = parse_run(_k8s_worker_args())["metrics_port"]
    (named,) = [p for p in container["ports"] if p["name"] == "metrics"]
    assert named["containerPort"] == k8s_port
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(k8s_port)
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    service = k8s_object("Service", "jsworker-metrics")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (service_port,) = service["spec"]["ports"]
    assert service_port["targetPort"] in ("metrics", k8s_port)
    monitor = k8s_object("PodMonitor", "jsworker")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]] == ["metrics"]


def test_stop_grace_outlasts_the_worker_grace() -> None:
    worker = _compose()["services"]["worker"]
    grace = parse_run(_compose_worker_args())["grace"]
    assert seconds(worker["stop_grace_period"]) > grace
    deployment, _ = _k8s_worker()
    k8s_grace = parse_run(_k8s_worker_args())["grace"]
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > k8s_grace


def _size(value: str) -> int:
    """A nats-server (``8GB``) or Kubernetes (``10Gi``) size in bytes, read as jsworker reads
    JSWORKER_*_MAX_BYTES."""
    return parse_size("size", value)


def _conf_value(config: str, key: str) -> str:
    """The value of a top-level or nested ``key: value`` line of a nats-server config."""
    found = re.findall(rf"^\s*{key}:\s*(\S+)\s*$", strip_conf_comments(config), re.MULTILINE)
    assert len(found) == 1, f"{key}: {found}"
    return str(found[0])


def _lame_duck_seconds(config: str) -> float:
    """How long a node in lame duck mode may take to exit: the grace period plus the duration."""
    return seconds(_conf_value(config, "lame_duck_duration")) + seconds(
        _conf_value(config, "lame_duck_grace_period")
    )


def test_compose_stops_nats_in_lame_duck_mode() -> None:
    """SIGUSR2 on every planned stop, and Docker waits longer than lame duck takes."""
    ldm = _lame_duck_seconds(compose_nats_files()["cluster.conf"])
    for i in (1, 2, 3):
        svc = _compose()["services"][f"nats-{i}"]
        assert svc["stop_signal"] == "SIGUSR2"
        assert seconds(svc["stop_grace_period"]) > ldm


def test_k8s_stops_nats_in_lame_duck_mode() -> None:
    """A preStop hook signals lame duck to the pid file the config writes (on a volume of its
    own), the grace period outlasts it, a pod counts as started only once caught up, and
    voluntary disruptions take one pod at a time."""
    config = k8s_nats_files()["nats.conf"]
    pid_file = _conf_value(config, "pid_file")
    spec = k8s_object("StatefulSet", "nats")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["lifecycle"]["preStop"]["exec"]["command"] == [
        "nats-server",
        "--signal",
        f"ldm={pid_file}",
    ]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes[mounts[str(Path(pid_file).parent)]]
    assert spec["terminationGracePeriodSeconds"] > _lame_duck_seconds(config)
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    budget = k8s_object("PodDisruptionBudget", "nats")["spec"]
    assert budget["maxUnavailable"] == 1
    assert budget["selector"] == k8s_object("StatefulSet", "nats")["spec"]["selector"]


def test_jetstream_storage_stays_below_the_volume() -> None:
    """max_file_store leaves a fifth of the volume free (Raft logs, snapshots, the filesystem);
    the bounded dead-letter and event streams fit inside it."""
    k8s_store = _size(_conf_value(k8s_nats_files()["nats.conf"], "max_file_store"))
    (claim,) = k8s_object("StatefulSet", "nats")["spec"]["volumeClaimTemplates"]
    volume = _size(claim["spec"]["resources"]["requests"]["storage"])
    assert k8s_store <= 0.8 * volume, (k8s_store, volume)
    compose_store = _size(_conf_value(compose_nats_files()["cluster.conf"], "max_file_store"))
    assert compose_store == k8s_store, "the two templates size their stores alike"
    for env in _worker_environments():
        reserved = _size(env["JSWORKER_DLQ_MAX_BYTES"]) + _size(env["JSWORKER_EVENTS_MAX_BYTES"])
        assert reserved <= compose_store / 4, "most of the store is for jobs"


def test_nats_syncs_every_write_before_acknowledging_it() -> None:
    """An enqueue receipt from the deployed cluster survives a power cut of every node: both
    templates flush each write before the server acknowledges it."""
    for conf in (k8s_nats_files()["nats.conf"], compose_nats_files()["cluster.conf"]):
        assert _conf_value(conf, "sync_interval") == "always"


def _worker_environments() -> list[dict[str, str]]:
    _, container = _k8s_worker()
    k8s = {e["name"]: e.get("value") for e in container["env"]}
    return [_compose()["services"]["worker"]["environment"], k8s]


def test_workers_make_streams_with_three_replicas() -> None:
    for env in _worker_environments():
        assert env["JSWORKER_REPLICAS"] == "3"


def test_workers_know_all_three_nats_nodes() -> None:
    worker = _compose()["services"]["worker"]
    urls = worker["environment"]["JSWORKER_URL"].split(",")
    assert sorted(urlsplit(u).netloc for u in urls) == [f"nats-{i}:4222" for i in (1, 2, 3)]
    # The nodes, and the provisioning step that makes the streams first.
    assert set(worker["depends_on"]) == {"nats-1", "nats-2", "nats-3", "provision"}
    assert set(_compose()["services"]["provision"]["depends_on"]) == {"nats-1", "nats-2", "nats-3"}

    _, container = _k8s_worker()
    env = {e["name"]: e.get("value") for e in container["env"]}
    urls = env["JSWORKER_URL"].split(",")
    assert sorted(urlsplit(u).netloc for u in urls) == [f"nats-{i}.nats:4222" for i in range(3)]
    assert container["resources"]["requests"]["cpu"] and container["resources"]["requests"]["memory"]


def test_k8s_manifests_parse_and_kustomization_lists_them() -> None:
    objects = k8s_objects()
    assert {o["kind"] for o in objects} >= {"Deployment", "Service", "PodMonitor", "StatefulSet", "ConfigMap"}
    for obj in objects:
        assert obj["apiVersion"] and obj["metadata"]["name"], obj
    kustomization = load_yaml(K8S / "kustomization.yaml")
    for resource in kustomization["resources"]:
        assert (K8S / resource).is_file(), resource


def test_prometheus_and_grafana_are_wired_to_the_files() -> None:
    services = _compose()["services"]
    config = load_yaml(PROMETHEUS_YML)
    prom_dir = DEPLOY / _mount(services["prometheus"], "/etc/prometheus")
    assert prom_dir == PROMETHEUS_YML.parent
    assert [prom_dir / f for f in config["rule_files"]] == [ALERTS]

    grafana = services["grafana"]
    provisioning = DEPLOY / _mount(grafana, "/etc/grafana/provisioning")
    (source,) = load_yaml(provisioning / "datasources" / "prometheus.yaml")["datasources"]
    url = urlsplit(source["url"])
    assert source["type"] == "prometheus" and source["isDefault"]
    assert url.hostname == "prometheus" and url.port == 9090
    assert published(services["prometheus"])["9090"] == ("127.0.0.1", "9090")
    (provider,) = load_yaml(provisioning / "dashboards" / "jsworker.yaml")["providers"]
    dashboards = DEPLOY / _mount(grafana, provider["options"]["path"])
    assert (dashboards / "jsworker.json").samefile(ROOT / "grafana" / "jsworker.json")
    assert published(grafana)["3000"] == ("127.0.0.1", "3000")
    build = services["worker"]["build"]
    assert (DEPLOY / build["context"] / build["dockerfile"]).samefile(DOCKERFILE)


def test_deploy_readme_documents_every_file() -> None:
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    files = [p for p in DEPLOY.rglob("*") if p.is_file() and p.name != "README.md"]
    missing = [str(p.relative_to(DEPLOY)) for p in files if str(p.relative_to(DEPLOY)) not in readme]
    assert not missing, f"deploy/README.md does not mention {missing}"
    assert "grafana/jsworker.json" in readme and "localhost:3000" in readme
