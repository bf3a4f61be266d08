"""The deployment templates are secure as shipped: TLS, least-privilege users, no open Grafana.

Static checks of deploy/ (users, TLS blocks, secrets, published ports, the dev certificate
script), and one live check: a three-node cluster started from deploy/nats with its TLS routes
and users, a worker configured as compose configures it, a producer, a canceller and an
operator, all on loopback, in temporary directories.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from jsworker import App

from .. import launcher
from ..integration.workers import stop
from ..support import wait_until
from .live import (
    APP,
    QUICKSTART,
    Secured,
    auth_users,
    compose_worker_env,
    load_compose,
    run_compose_provision,
    secured_cluster,
)
from .opsfiles import (
    AUTH_CONF,
    COMPOSE,
    COMPOSE_TLS_NAMES,
    CONTAINER_TLS_DIR,
    DEPLOY,
    DEV_CERT_FILES,
    ENV_EXAMPLE,
    GITIGNORE,
    MAKE_DEV_CERTS,
    TLS_DIR,
    compose_nats_files,
    compose_variables,
    conf_blocks,
    expand_includes,
    image_run_args,
    is_required_variable,
    k8s_nats_files,
    k8s_object,
    load_yaml_all,
    permissions_output,
    run_make_dev_certs,
    strip_conf_comments,
    top_level,
    without_leading_comments,
)

ROLES = ("producer", "canceller", "worker", "operator", "dashboard", "provisioner")
# The one role that answers the questions it receives (status and cancel, from producers whose
# inboxes it may not publish to): NATS ``allow_responses``.
ANSWERING = {"worker"}


# --- the users --------------------------------------------------------------------------------


def test_auth_conf_is_what_jsworker_permissions_prints() -> None:
    """deploy/nats/auth.conf is the command's output, so it cannot drift from the permissions
    the code needs; its header says how it was made."""
    text = AUTH_CONF.read_text(encoding="utf-8")
    header = text[: len(text) - len(without_leading_comments(text))]
    assert f"jsworker permissions {APP}" in header, "the header should say how to regenerate it"
    assert without_leading_comments(text) == permissions_output(APP), (
        f"deploy/nats/auth.conf is stale: regenerate it with `jsworker permissions {APP}`"
    )


def test_k8s_auth_conf_is_the_same() -> None:
    assert without_leading_comments(k8s_nats_files()["auth.conf"]) == permissions_output(APP), (
        f"the auth.conf key of deploy/k8s/nats.yaml differs from `jsworker permissions {APP}`"
    )


def test_every_user_is_a_role_with_its_password_from_the_environment() -> None:
    """One user per role, each with allow lists (no unrestricted user) and a password that is a
    variable (no secret in the file)."""
    users = auth_users()
    assert users == {f"{APP}-{role}": f"{APP.upper()}_{role.upper()}_PASSWORD" for role in ROLES}
    auth = conf_blocks(strip_conf_comments(AUTH_CONF.read_text(encoding="utf-8")))["authorization"]
    # An entry: {user: "...", password: $VAR,\n permissions: {...JSON on one line...}}; the
    # worker's permissions end in `"allow_responses": true}`, the others' in `]}}`.
    entries = re.findall(
        r'\{user:\s*"([^"]+)",\s*password:\s*(\S+),\s*permissions:\s*(\{.*\})\}[ \t]*$', auth, flags=re.M
    )
    assert len(entries) == len(users) == auth.count("{user:"), "every user entry should be one of the roles"
    for user, password, block in entries:
        assert re.fullmatch(r"\$[A-Z_]+", password), f"{user}: {password}"
        perms = json.loads(block)
        assert set(perms) <= {"publish", "subscribe", "allow_responses"}, f"{user}: {sorted(perms)}"
        for kind in ("publish", "subscribe"):
            assert set(perms[kind]) == {"allow"}, f"{user}: {kind} {sorted(perms[kind])}"
            allowed = perms[kind]["allow"]
            assert allowed and all(isinstance(s, str) for s in allowed), f"{user}: {kind}"
            assert ">" not in allowed, f"{user} may {kind} on every subject"
        role = user.removeprefix(f"{APP}-")
        assert perms.get("allow_responses", False) is (role in ANSWERING), (
            f"{user}: allow_responses {perms.get('allow_responses')}"
        )


# --- the NATS configs -------------------------------------------------------------------------


def _configs() -> dict[str, tuple[str, dict[str, str]]]:
    """Every nats-server config a node runs: name -> (main file's text, the files beside it)."""
    compose = compose_nats_files()
    k8s = k8s_nats_files()
    out = {f"compose {name}": (compose[name], compose) for name in compose if name.startswith("nats-")}
    out["k8s nats.conf"] = (k8s["nats.conf"], k8s)
    return out


def _tls_files(block: str) -> dict[str, str]:
    return dict(re.findall(r"^\s*(cert_file|key_file|ca_file)\s*[:=]\s*\"?([^\"\s]+)\"?", block, re.M))


# Named here rather than read at collection, so a parse error fails a test instead of collection.
CONFIGS = ["compose nats-1.conf", "compose nats-2.conf", "compose nats-3.conf", "k8s nats.conf"]


def test_every_node_config_is_checked() -> None:
    assert sorted(_configs()) == CONFIGS


@pytest.mark.parametrize("name", CONFIGS)
def test_nats_config_requires_tls_and_includes_the_users(name: str) -> None:
    main, files = _configs()[name]
    marker = "auth_conf_included: true\n"
    reached = strip_conf_comments(expand_includes(main, {**files, "auth.conf": marker}))
    assert marker in reached, f"{name}: does not include ./auth.conf"
    text = strip_conf_comments(expand_includes(main, files))
    blocks = conf_blocks(text)
    settings = top_level(text)

    assert "authorization" in blocks, f"{name}: no users"
    assert re.search(r"\busers\s*=", blocks["authorization"]), f"{name}: authorization without users"
    for risky in ("no_auth_user", "accounts", "authorization_callout"):
        assert not re.search(rf"^\s*{risky}\b", settings, re.M), (
            f"{name}: {risky} opens a way around the users"
        )

    # Clients: a top-level tls block makes TLS mandatory for every client connection.
    assert "tls" in blocks, f"{name}: client connections without TLS"
    client_tls = _tls_files(blocks["tls"])
    assert set(client_tls) == {"cert_file", "key_file", "ca_file"}, f"{name}: {client_tls}"
    assert not re.search(r"\binsecure\s*:\s*true", blocks["tls"]), name
    # Routes: TLS too (nats-server makes them mutual), with the same files.
    cluster = conf_blocks(blocks["cluster"])
    assert "tls" in cluster, f"{name}: cluster routes without TLS"
    assert _tls_files(cluster["tls"]) == client_tls, f"{name}: routes use other TLS files"
    assert re.search(r"^\s*no_advertise\s*:\s*true", blocks["cluster"], re.M), (
        f"{name}: servers would advertise IP addresses the certificate does not name"
    )
    for path in client_tls.values():
        assert path.startswith(CONTAINER_TLS_DIR + "/"), f"{name}: {path} outside {CONTAINER_TLS_DIR}"


def test_compose_nats_nodes_get_the_role_passwords_and_the_tls_files() -> None:
    compose = load_compose()
    cluster = conf_blocks(strip_conf_comments(compose_nats_files()["cluster.conf"]))
    wanted = {Path(p).name: p for p in _tls_files(cluster["tls"]).values()}
    assert set(wanted) == set(COMPOSE_TLS_NAMES)
    for name in ("nats-1", "nats-2", "nats-3"):
        svc = compose["services"][name]
        env = svc["environment"]
        for variable in auth_users().values():
            assert is_required_variable(env[variable]) == variable, (
                f"{name}: {variable} should be ${{{variable}:?...}} so compose refuses to start without it"
            )
        # Each TLS file where the config looks for it, from the file make-dev-certs.sh writes.
        mounted = {}
        for kind in ("secrets", "configs"):
            for entry in svc.get(kind, []):
                source = compose[kind][entry["source"]]["file"]
                mounted[entry["target"]] = (kind, source)
        for file, path in wanted.items():
            assert path in mounted, f"{name}: nothing mounted at {path}"
            assert mounted[path][1] == f"./tls/{file}", mounted[path]
            assert Path(mounted[path][1]).name in DEV_CERT_FILES
        assert mounted[wanted["server.key"]][0] == "secrets", "the server key should be a compose secret"
        # The CA key is the one TLS file no container needs.
        assert all(not source.endswith("ca.key") for _, source in mounted.values())
        assert not any("tls" in str(v).split(":")[0] for v in svc.get("volumes", [])), (
            f"{name}: mounts the whole tls directory (with the CA key)"
        )


def test_k8s_nats_gets_passwords_and_tls_files_from_secrets() -> None:
    sts = k8s_object("StatefulSet", "nats")
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    for variable in auth_users().values():
        ref = env[variable]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": "nats-users", "key": variable}, ref
    config = conf_blocks(strip_conf_comments(k8s_nats_files()["nats.conf"]))
    files = _tls_files(config["tls"]).values()
    dirs = {str(Path(p).parent) for p in files}
    assert dirs == {CONTAINER_TLS_DIR}
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == CONTAINER_TLS_DIR]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "nats-tls"
    # cert-manager's key names, so its Certificate's Secret works as it is.
    assert {Path(p).name for p in files} == {"tls.crt", "tls.key", "ca.crt"}
    (config_mount,) = [m for m in container["volumeMounts"] if m["name"] == "config"]
    conf_path = container["args"][container["args"].index("--config") + 1]
    assert Path(conf_path).parent == Path(config_mount["mountPath"])


# --- the workers ------------------------------------------------------------------------------


def test_compose_workers_log_in_as_the_worker_over_tls() -> None:
    compose = load_compose()
    worker = compose["services"]["worker"]
    env = worker["environment"]
    urls = env["JSWORKER_URL"].split(",")
    assert urls and all(urlsplit(u).scheme == "tls" for u in urls), urls
    users = auth_users()
    assert env["JSWORKER_USER"] == f"{APP}-worker"
    assert is_required_variable(env["JSWORKER_PASSWORD"]) == users[env["JSWORKER_USER"]]
    # The CA certificate, and nothing else of the TLS files, reaches the workers.
    mounted = {c["target"]: compose["configs"][c["source"]]["file"] for c in worker.get("configs", [])}
    assert mounted == {env["JSWORKER_TLS_CA"]: "./tls/ca.pem"}
    assert "secrets" not in worker and not worker.get("volumes"), "workers need no other file"
    assert "ports" not in worker, "the metrics port (plain HTTP) stays on the compose network"


def test_k8s_workers_log_in_as_the_worker_over_tls() -> None:
    deployment = k8s_object("Deployment", "jsworker")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    urls = env["JSWORKER_URL"]["value"].split(",")
    assert urls and all(urlsplit(u).scheme == "tls" for u in urls), urls
    user = env["JSWORKER_USER"]["value"]
    assert user == f"{APP}-worker"
    ref = env["JSWORKER_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "nats-users", "key": auth_users()[user]}
    ca = Path(env["JSWORKER_TLS_CA"]["value"])
    (mount,) = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == ca.parent]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "nats-tls"
    assert volume["secret"]["items"] == [{"key": "ca.crt", "path": ca.name}], "the CA only, not the key"


# --- the provisioning step --------------------------------------------------------------------

# What the provisioning step must share with the workers: the streams it makes are the ones
# they check, and a worker with other settings would find them out of date.
APP_SETTINGS = (
    "JSWORKER_URL",
    "JSWORKER_APP",
    "JSWORKER_TLS_CA",
    "JSWORKER_REPLICAS",
    "JSWORKER_DLQ_MAX_BYTES",
    "JSWORKER_EVENTS_MAX_BYTES",
)


def test_compose_provisions_once_before_the_workers_as_the_provisioner() -> None:
    compose = load_compose()
    step, worker = compose["services"]["provision"], compose["services"]["worker"]
    assert step["restart"] == "no", "a one-shot step: restarted, it would never complete"
    assert worker["depends_on"]["provision"] == {"condition": "service_completed_successfully"}
    assert step["image"] == worker["image"] and step["build"] == worker["build"]
    env = step["environment"]
    assert env["JSWORKER_USER"] == f"{APP}-provisioner"
    assert is_required_variable(env["JSWORKER_PASSWORD"]) == auth_users()[env["JSWORKER_USER"]]
    assert {k: env[k] for k in APP_SETTINGS} == {k: worker["environment"][k] for k in APP_SETTINGS}
    assert "PROVISIONER" not in json.dumps(worker), "the workers never get the provisioner's password"
    mounted = {c["target"]: compose["configs"][c["source"]]["file"] for c in step.get("configs", [])}
    assert mounted == {env["JSWORKER_TLS_CA"]: "./tls/ca.pem"}
    assert "secrets" not in step and "ports" not in step


def test_k8s_provisions_in_an_init_container_as_the_provisioner() -> None:
    pod = k8s_object("Deployment", "jsworker")["spec"]["template"]["spec"]
    (step,) = pod["initContainers"]
    (worker,) = pod["containers"]
    assert step["image"] == worker["image"]
    assert step["command"][-2:] == ["provision", "$(JSWORKER_APP)"], step["command"]
    env = {e["name"]: e for e in step["env"]}
    worker_env = {e["name"]: e for e in worker["env"]}
    assert env["JSWORKER_USER"]["value"] == f"{APP}-provisioner"
    ref = env["JSWORKER_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "nats-users", "key": auth_users()[f"{APP}-provisioner"]}
    assert {k: env[k] for k in APP_SETTINGS} == {k: worker_env[k] for k in APP_SETTINGS}
    assert "PROVISIONER" not in json.dumps(worker), "the worker never gets the provisioner's password"
    assert step["volumeMounts"] == worker["volumeMounts"], "the CA certificate, as the worker's"


# --- secrets, Grafana, ports ------------------------------------------------------------------


def _yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def _mappings(node: Any) -> Iterator[dict[Any, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _mappings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _mappings(item)


# Environment variables (compose keys, Kubernetes env names) that hold a secret.
_SECRET_VARIABLE = re.compile(r"[A-Z0-9_]*(PASSWORD|SECRET|TOKEN|_KEY)[A-Z0-9_]*")


def test_no_template_holds_a_secret_value() -> None:
    """Passwords only as required variables (compose) or Secret references (Kubernetes); no
    Secret object with data in the manifests; no admin/admin anywhere."""
    for path in _yaml_files():
        for mapping in (m for doc in load_yaml_all(path) for m in _mappings(doc)):
            if mapping.get("kind") == "Secret":
                pytest.fail(f"{path.name}: a Secret in the manifests puts its values in the repository")
            for key, value in mapping.items():
                if isinstance(key, str) and _SECRET_VARIABLE.fullmatch(key):
                    assert isinstance(value, str) and is_required_variable(value), (
                        f"{path.name}: {key} should be ${{VAR:?message}}, not {value!r}"
                    )
            # Kubernetes env entries: {name: ..._PASSWORD, valueFrom: secretKeyRef}.
            name = mapping.get("name")
            if isinstance(name, str) and _SECRET_VARIABLE.fullmatch(name):
                assert "value" not in mapping, f"{path.name}: {name} has a literal value"
                assert "secretKeyRef" in mapping["valueFrom"], f"{path.name}: {name} not from a Secret"
    for path in sorted(p for p in DEPLOY.rglob("*") if p.is_file()):
        if path.name in DEV_CERT_FILES or path.name == ".env":
            continue  # generated locally and git-ignored
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"\badmin\W{1,6}admin\b", text), f"{path.relative_to(DEPLOY)}: admin/admin"


def test_grafana_requires_a_login() -> None:
    for path in _yaml_files():
        for mapping in (m for doc in load_yaml_all(path) for m in _mappings(doc)):
            for key, value in mapping.items():
                if key == "GF_AUTH_ANONYMOUS_ENABLED":
                    assert str(value).lower() == "false", f"{path.name}: anonymous Grafana"
                assert key != "GF_AUTH_ANONYMOUS_ORG_ROLE", f"{path.name}: a role for anonymous users"
    grafana = load_compose()["services"]["grafana"]["environment"]
    assert is_required_variable(grafana["GF_SECURITY_ADMIN_PASSWORD"]) == "GRAFANA_ADMIN_PASSWORD"
    assert str(grafana["GF_AUTH_ANONYMOUS_ENABLED"]).lower() == "false"


def test_published_ports_listen_on_loopback_only() -> None:
    for name, svc in load_compose()["services"].items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name}: {port} is reachable from other machines"


def test_env_example_lists_every_required_variable_without_a_value() -> None:
    """Compose stops on an unset variable; env.example names each one and gives no value to copy."""
    text = COMPOSE.read_text(encoding="utf-8")
    required = set(compose_variables(text))
    assert all(is_required_variable(m.group(0)) for m in re.finditer(r"\$\{[^}]*\}", text)), (
        "every compose variable should be required (${VAR:?message})"
    )
    listed = {}
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            listed[key.strip()] = value.strip()
    assert set(listed) == required
    assert all(value == "" for value in listed.values()), "env.example should hold no password"


def test_generated_files_are_git_ignored() -> None:
    patterns = [
        line.strip().lstrip("/")
        for line in GITIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for path in [f"deploy/tls/{name}" for name in DEV_CERT_FILES] + ["deploy/.env"]:
        assert any(fnmatch.fnmatch(path, p) for p in patterns), f".gitignore does not cover {path}"


# --- the dev certificates ---------------------------------------------------------------------


def _openssl(*args: str) -> str:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, f"openssl {' '.join(args)}: {result.stderr}"
    return result.stdout


def _san(cert: Path) -> set[str]:
    text = _openssl("x509", "-in", str(cert), "-noout", "-text")
    found = re.search(r"X509v3 Subject Alternative Name:.*?\n\s*(.+)", text)
    assert found, "no subjectAltName"
    return {entry.strip().replace("IP Address:", "IP:") for entry in found.group(1).split(",")}


def _hosts_dialed() -> set[str]:
    """Every host name a client or a route dials in the templates."""
    compose = load_compose()
    urls = compose["services"]["worker"]["environment"]["JSWORKER_URL"].split(",")
    (container,) = k8s_object("Deployment", "jsworker")["spec"]["template"]["spec"]["containers"]
    urls += next(e["value"] for e in container["env"] if e["name"] == "JSWORKER_URL").split(",")
    text = "".join(compose_nats_files().values()) + k8s_nats_files()["nats.conf"]
    urls += re.findall(r"nats-route://[^\s,\]]+", strip_conf_comments(text))
    return {str(urlsplit(u).hostname) for u in urls} | {"localhost", "127.0.0.1"}


def test_make_dev_certs_makes_a_ca_and_a_server_certificate_for_every_name(dev_certs: Path) -> None:
    assert sorted(p.name for p in dev_certs.iterdir()) == sorted(DEV_CERT_FILES)
    assert "OK" in _openssl("verify", "-CAfile", str(dev_certs / "ca.pem"), str(dev_certs / "server.pem"))
    san = _san(dev_certs / "server.pem")
    for host in _hosts_dialed():
        kind = "IP" if re.fullmatch(r"[\d.]+", host) else "DNS"
        assert f"{kind}:{host}" in san, f"the certificate does not name {host}: {sorted(san)}"
    text = _openssl("x509", "-in", str(dev_certs / "server.pem"), "-noout", "-text")
    # Routes present the server certificate as a client certificate too.
    assert "TLS Web Server Authentication" in text and "TLS Web Client Authentication" in text
    for key in ("ca.key", "server.key"):
        assert stat.S_IMODE((dev_certs / key).stat().st_mode) == 0o600, f"{key} readable by others"


def test_make_dev_certs_script_is_safe_to_run(tmp_path: Path) -> None:
    """Executable, strict, says it is not for production; NAMESPACE adds that namespace's
    names; given a directory it writes nothing into the repository."""
    assert os.access(MAKE_DEV_CERTS, os.X_OK), "make-dev-certs.sh lost its run bit"
    text = MAKE_DEV_CERTS.read_text(encoding="utf-8")
    assert text.startswith("#!/usr/bin/env bash\n") and "\nset -euo pipefail\n" in text
    head = text[: text.index("set -euo")].lower()
    assert "production" in head and "cert-manager" in head
    before = sorted(p.name for p in TLS_DIR.iterdir())
    run_make_dev_certs(tmp_path / "tls", namespace="jobs")
    assert sorted(p.name for p in TLS_DIR.iterdir()) == before
    san = _san(tmp_path / "tls" / "server.pem")
    assert {"DNS:*.nats.jobs.svc", "DNS:*.nats.jobs.svc.cluster.local", "DNS:nats-1"} <= san


# --- live: the templates run a job with TLS and users -----------------------------------------


@pytest.fixture
def secured(dev_certs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Secured]:
    """The compose cluster's configs, run on loopback with dev certificates and made-up
    passwords in the environment, as compose passes them."""
    with secured_cluster(dev_certs, tmp_path, monkeypatch) as cluster:
        yield cluster


def _server_info(port: int) -> dict[str, Any]:
    """The INFO line a server sends to a plain TCP client before anything else."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        data = b""
        while not data.endswith(b"\r\n"):
            chunk = sock.recv(4096)
            assert chunk, "the server closed the connection before its INFO"
            data += chunk
    assert data.startswith(b"INFO "), data[:40]
    info: dict[str, Any] = json.loads(data[5:])
    return info


def _cli_env(env: dict[str, str]) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("JSWORKER_")}
    return {**base, "PYTHONPATH": str(QUICKSTART), **env}


def _wait_for_log(proc: subprocess.Popen[bytes], log: Path, pattern: str) -> str:
    def seen() -> str | None:
        text = log.read_text(encoding="utf-8", errors="replace")
        if re.search(pattern, text):
            return text
        assert proc.poll() is None, f"the worker exited with {proc.returncode}:\n{text}"
        return None

    found = wait_until(seen, timeout=30, message=f"{pattern!r} in the worker log")
    assert found is not None
    return found


def _as_role(secured: Secured, role: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``jsworker ARGS`` run as the user of ``role`` of auth.conf, over TLS."""
    env = {
        "JSWORKER_URL": secured.urls(),
        "JSWORKER_USER": f"{APP}-{role}",
        "JSWORKER_PASSWORD": secured.password(role),
        "JSWORKER_TLS_CA": str(secured.ca),
    }
    return launcher.run(args, env=_cli_env(env), timeout=60)


def _job_state(secured: Secured, job_id: str) -> str:
    """The state `jsworker jobs status` gives the producer (asked of the workers while the job
    is not finished)."""
    found = _as_role(secured, "producer", "jobs", "status", "tasks", job_id, "--json")
    assert found.returncode == 0, found.stderr
    state: str = json.loads(found.stdout)["state"]
    return state


def test_templates_run_a_job_with_tls_and_users(secured: Secured, tmp_path: Path) -> None:
    """The compose NATS configs form a cluster over TLS routes; a worker with compose's worker
    environment runs the quickstart app; the producer enqueues and reads status and result (a
    waiting job's status answered by the workers) but may not cancel; the canceller cancels;
    the operator reads the status of the queues; a client without TLS or without a user gets
    nowhere."""
    for server in secured.nodes.values():
        info = _server_info(server.port)
        assert info.get("tls_required") and info.get("auth_required"), info

    # The provisioning step first, as compose runs it: the worker may not make the streams.
    made = run_compose_provision(_cli_env(compose_worker_env(secured, "provision")), QUICKSTART)
    assert "stream JSW_QUICKSTART: created" in made, made
    env = compose_worker_env(secured)
    worker_cmd = load_compose()["services"]["worker"]["command"]
    argv = image_run_args(worker_cmd, env["JSWORKER_APP"])
    # The metrics port is the image's business; a test must not take 9400 on the host.
    at = argv.index("--metrics-port")
    del argv[at : at + 2]
    log = tmp_path / "worker.log"
    with open(log, "ab") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "jsworker", "run", *argv],
            env=_cli_env(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        _wait_for_log(worker, log, r"worker\.started")

        producer = App(
            APP,
            secured.urls(),
            user=f"{APP}-producer",
            password=secured.password("producer"),
            tls_ca=str(secured.ca),
            events=True,
            publish_timeout=15,
        )

        @producer.task
        async def resize_image(path: str, width: int) -> str:  # the quickstart's, by name
            raise AssertionError("runs on the worker")

        try:
            job = resize_image.delay("cat.png", 640)
            # Due long after the test: waiting on the server until it is cancelled.
            later = resize_image.apply(("dog.png", 320), countdown=3600)
        finally:
            producer.close()
        _wait_for_log(worker, log, rf'"resized".*{job.id}|{job.id}.*"resized"')

        # A waiting job: the producer may not read it, the workers answer for it.
        assert _job_state(secured, later.id) == "scheduled"
        # Cancelling is the canceller's: the server refuses the producer's question.
        refused = _as_role(secured, "producer", "jobs", "cancel", "tasks", later.id)
        assert refused.returncode == 3, (refused.returncode, refused.stderr)  # a refused permission
        assert "permission denied" in refused.stderr, refused.stderr
        assert f"jsw.{APP}.ask.cancel.{later.id}" in refused.stderr, refused.stderr
        assert _job_state(secured, later.id) == "scheduled"
        cancelled = _as_role(secured, "canceller", "jobs", "cancel", "tasks", later.id)
        assert cancelled.returncode == 0, cancelled.stderr
        assert _job_state(secured, later.id) == "cancelled"
        result = _as_role(secured, "producer", "jobs", "result", "tasks", later.id)
        assert result.returncode == 4 and "was cancelled" in result.stderr, (result.returncode, result.stderr)

        status = _as_role(secured, "operator", "status", "tasks", "--json")
        assert status.returncode == 0, status.stderr
        assert {json.loads(line)["queue"] for line in status.stdout.splitlines()} == {"default", "emails"}

        anonymous = App(APP, secured.urls(), tls_ca=str(secured.certs / "ca.pem"), connect_timeout=5)

        @anonymous.task
        async def send_email(to: str, subject: str) -> None: ...

        try:
            with pytest.raises(Exception, match=r"(?i)authorization"):
                send_email.delay("a@example.com", "hi")
        finally:
            anonymous.close()
    finally:
        assert stop(worker) == 0, log.read_text(encoding="utf-8", errors="replace")
    text = log.read_text(encoding="utf-8", errors="replace")
    assert "permission" not in text.lower(), text
    for password in secured.passwords.values():
        assert password not in text
