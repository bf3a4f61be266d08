"""The Kubernetes manifests checked as the API server would (each object of a built-in kind
against the Kubernetes schema of its version, strictly: no unknown field), and the KEDA
ScaledObject against the fields KEDA documents, wired to the worker Deployment and to the
consumers of the app it runs."""

from __future__ import annotations

from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from jsworker._wire.names import Namespace

from .opsfiles import K8S, k8s_object, k8s_objects, load_yaml_all

KUBERNETES = "1.31"
# Kinds that come with CRDs (KEDA's, the Prometheus Operator's): no Kubernetes schema has them.
_CUSTOM = {"ScaledObject", "PodMonitor"}
# The app worker.yaml runs (examples/quickstart/tasks.py) and its queue.
APP, QUEUE = "quickstart", "default"

_TRIGGER = {
    "type": "object",
    "required": ["type", "metadata"],
    "additionalProperties": False,
    "properties": {
        "type": {"const": "nats-jetstream"},
        "metadata": {
            "type": "object",
            "required": ["natsServerMonitoringEndpoint", "account", "stream", "consumer", "lagThreshold"],
            "additionalProperties": False,
            "properties": {
                "natsServerMonitoringEndpoint": {"type": "string", "pattern": r"^[a-z0-9.-]+:\d+$"},
                "account": {"type": "string"},
                "stream": {"type": "string"},
                "consumer": {"type": "string"},
                # KEDA reads trigger metadata as strings.
                "lagThreshold": {"type": "string", "pattern": r"^[1-9]\d*$"},
                "activationLagThreshold": {"type": "string", "pattern": r"^\d+$"},
                "useHttps": {"enum": ["true", "false"]},
            },
        },
    },
}
_POLICY = {
    "type": "object",
    "required": ["type", "value", "periodSeconds"],
    "additionalProperties": False,
    "properties": {
        "type": {"enum": ["Pods", "Percent"]},
        "value": {"type": "integer", "minimum": 1},
        "periodSeconds": {"type": "integer", "minimum": 1, "maximum": 1800},
    },
}
_RULES = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "stabilizationWindowSeconds": {"type": "integer", "minimum": 0, "maximum": 3600},
        "policies": {"type": "array", "items": _POLICY, "minItems": 1},
        "selectPolicy": {"enum": ["Max", "Min", "Disabled"]},
    },
}
#: The ScaledObject (keda.sh/v1alpha1) fields this deployment uses, as KEDA documents them.
SCALED_OBJECT: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "spec": {
            "type": "object",
            "required": ["scaleTargetRef", "triggers"],
            "additionalProperties": False,
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "required": ["name"],
                    "additionalProperties": False,
                    "properties": {
                        "name": {"type": "string"},
                        "kind": {"type": "string"},
                        "apiVersion": {"type": "string"},
                    },
                },
                "pollingInterval": {"type": "integer", "minimum": 1},
                "cooldownPeriod": {"type": "integer", "minimum": 0},
                "minReplicaCount": {"type": "integer", "minimum": 0},
                "maxReplicaCount": {"type": "integer", "minimum": 1},
                "advanced": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "horizontalPodAutoscalerConfig": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "behavior": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "properties": {"scaleDown": _RULES, "scaleUp": _RULES},
                                }
                            },
                        }
                    },
                },
                "triggers": {"type": "array", "items": _TRIGGER, "minItems": 1},
            },
        },
    },
}


@pytest.mark.parametrize(
    "obj", [o for o in k8s_objects() if o["kind"] not in _CUSTOM], ids=lambda o: o["kind"]
)
def test_every_built_in_object_is_valid_for_its_kubernetes_version(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, KUBERNETES, strict=True)


def test_a_wrong_field_is_caught() -> None:
    """The validation is not a no-op: a misspelt field of the worker Deployment fails it."""
    deployment = k8s_object("Deployment", "jsworker")
    wrong = {**deployment, "spec": {**deployment["spec"], "replica": 3}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong, KUBERNETES, strict=True)
    (scaled,) = load_yaml_all(K8S / "autoscaling.yaml")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**scaled, "spec": {**scaled["spec"], "minReplicas": 1}}, SCALED_OBJECT)


def test_the_workers_scale_on_their_queues_backlog() -> None:
    (scaled,) = load_yaml_all(K8S / "autoscaling.yaml")
    jsonschema.validate(scaled, SCALED_OBJECT)
    spec = scaled["spec"]
    deployment = k8s_object("Deployment", spec["scaleTargetRef"]["name"])
    # At least one worker: workers move due delayed jobs and ticks into their queues.
    assert 1 <= spec["minReplicaCount"] < spec["maxReplicaCount"]
    assert spec["minReplicaCount"] <= deployment["spec"]["replicas"] <= spec["maxReplicaCount"]
    monitor = next(p for p in k8s_object("Service", "nats")["spec"]["ports"] if p["name"] == "monitor")
    ns = Namespace(APP)
    for trigger in spec["triggers"]:
        meta = trigger["metadata"]
        assert meta["natsServerMonitoringEndpoint"].startswith("nats.")
        assert meta["natsServerMonitoringEndpoint"].endswith(f":{monitor['port']}")
        assert (meta["stream"], meta["consumer"]) == (ns.partition_stream(0), QUEUE)
    # The partition example names the streams as the app does.
    text = (K8S / "autoscaling.yaml").read_text()
    assert f"stream: {ns.partition_stream(1)}" in text


def test_scale_down_lets_a_stopping_worker_finish() -> None:
    """A pod removed by scale-down gets the same stop as any other: its grace period covers
    the worker's --grace, and pods go one at a time after a quiet spell."""
    (scaled,) = load_yaml_all(K8S / "autoscaling.yaml")
    down = scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
    assert down["stabilizationWindowSeconds"] >= 60
    assert all(p["type"] == "Pods" and p["value"] == 1 for p in down["policies"])
    pod = k8s_object("Deployment", "jsworker")["spec"]["template"]["spec"]
    (worker,) = [c for c in pod["containers"] if c["name"] == "worker"]
    grace = int(worker["args"][worker["args"].index("--grace") + 1])
    assert pod["terminationGracePeriodSeconds"] >= grace + 10
