"""Running the deployment templates for real, for the live tests of tests/ops.

- The compose NATS configs (deploy/nats) as a three-node cluster on loopback: dev certificates,
  made-up role passwords in the environment (as compose passes them), and only what cannot be
  the same outside containers substituted (ports, file paths, the store).
- Workers started with the worker image's command and compose's worker environment.
- Debian's Prometheus on a free loopback port with a temporary store.
- The operator role's view of the app's streams (its STREAM.INFO), since no user of auth.conf
  may do more.

Every process here is started by the test process and stopped through its own handle (a Popen or
a NatsServer), never by name.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest

from jsworker._server import NatsServer, PortInUseError

from .. import launcher
from ..integration.workers import wait_serving
from ..support import exited, free_port, need, on_a_free_port, wait_until
from .opsfiles import (
    AUTH_CONF,
    COMPOSE,
    COMPOSE_TLS_NAMES,
    DOCKERFILE,
    ROOT,
    compose_nats_files,
    copy_configs,
    image_run_args,
    interpolate,
    load_yaml,
    made_up_passwords,
    password_variables,
)

APP = "quickstart"  # the only app the users of deploy/nats/auth.conf may use
QUICKSTART = ROOT / "examples" / "quickstart"
NODES = ("nats-1", "nats-2", "nats-3")  # compose's services, which are also the server names
PROMETHEUS = os.environ.get("JSWORKER_PROMETHEUS", "/usr/bin/prometheus")
PROMTOOL = os.environ.get("JSWORKER_PROMTOOL", "/usr/bin/promtool")

# No proxy may see (or swallow) a request to our own loopback ports.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def load_compose() -> dict[str, Any]:
    data: dict[str, Any] = load_yaml(COMPOSE)
    return data


def auth_users() -> dict[str, str]:
    """user -> password variable of deploy/nats/auth.conf."""
    return password_variables(AUTH_CONF.read_text(encoding="utf-8"))


def get_json(url: str, timeout: float = 5.0) -> Any:
    """The JSON answer of a GET to one of our loopback HTTP ports (an error answer's body too)."""
    try:
        with _OPENER.open(url, timeout=timeout) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as exc:  # Prometheus answers a bad query with 400 and the reason
        with exc:
            return json.load(exc)


def http_status(url: str, timeout: float = 5.0) -> int:
    """The status of a GET (0 when nothing answered)."""
    try:
        with _OPENER.open(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        with exc:
            return int(exc.code)
    except OSError:
        return 0


# --- the NATS cluster -------------------------------------------------------------------------


@dataclass
class Secured:
    nodes: dict[str, NatsServer]  # compose service name -> our server
    passwords: dict[str, str]  # variable -> value
    certs: Path

    def url(self, service: str) -> str:
        return f"tls://127.0.0.1:{self.nodes[service].port}"

    def urls(self) -> str:
        return ",".join(self.url(name) for name in self.nodes)

    def password(self, role: str) -> str:
        return self.passwords[auth_users()[f"{APP}-{role}"]]

    @property
    def ca(self) -> Path:
        return self.certs / "ca.pem"


def node_configs(certs: Path, dest: Path, route_ports: dict[str, int], node: str) -> Path:
    """deploy/nats for one node on loopback: TLS files from ``certs``, routes and this node's
    cluster port on 127.0.0.1 (in containers every node has 6222 on its own address), the
    store in a temporary directory. Everything else is as the containers run it."""
    files = compose_nats_files()
    cluster = files["cluster.conf"]
    assert cluster.count("port: 6222") == 1, "expected one cluster port to move to loopback"
    # NatsServer gives the store directory (-sd), which nats-server refuses to get twice.
    assert cluster.count("store_dir: /data/jetstream") == 1
    cluster = cluster.replace("store_dir: /data/jetstream", "")
    cluster = cluster.replace("port: 6222", f"listen: 127.0.0.1:{route_ports[node]}")
    for other, port in route_ports.items():
        route = f"nats-route://{other}:6222"
        assert cluster.count(route) == 1, route
        cluster = cluster.replace(route, f"nats-route://127.0.0.1:{port}")
    return copy_configs({**files, "cluster.conf": cluster}, dest, certs, COMPOSE_TLS_NAMES)


def meta_leader(nodes: list[NatsServer]) -> bool:
    """Whether every node runs and they agree on one JetStream meta leader for all of them."""
    metas = [(node.jsz() or {}).get("meta_cluster") or {} for node in nodes]
    leaders = {meta.get("leader") for meta in metas}
    return (
        len(leaders) == 1 and None not in leaders and all(m.get("cluster_size") == len(nodes) for m in metas)
    )


def start_cluster(certs: Path, base: Path) -> dict[str, NatsServer]:
    """The three compose nodes, started. Each keeps its store and its log under ``base/<node>``,
    and its client port and route port across ``kill()``/``restart()``, so a node started again
    rejoins as the same member."""
    route_ports = {name: free_port() for name in NODES}
    nodes: dict[str, NatsServer] = {}
    try:
        for name in NODES:
            conf = node_configs(certs, base / name, route_ports, name) / f"{name}.conf"
            # NatsServer adds -a 127.0.0.1, its own client and monitoring ports and store dir.
            server = NatsServer(
                extra_args=["-c", str(conf)],
                store_dir=base / name / "store",
                log_file=base / name / "nats-server.log",
            )
            nodes[name] = server
            server.start(timeout=30)
        wait_until(lambda: meta_leader(list(nodes.values())), timeout=30, message="a meta leader")
    except BaseException:
        for server in nodes.values():
            server.stop()
        raise
    return nodes


@contextmanager
def secured_cluster(certs: Path, base: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Secured]:
    """The compose cluster's configs, run on loopback with dev certificates and made-up
    passwords in the environment, as compose passes them. The variables stay set while the
    cluster runs: a node started again reads them again. No JSWORKER_* variable of the caller's
    environment reaches the apps of the test."""
    passwords = made_up_passwords(set(auth_users().values()))
    for variable, value_ in passwords.items():
        monkeypatch.setenv(variable, value_)
    for variable in [v for v in os.environ if v.startswith("JSWORKER_")]:
        monkeypatch.delenv(variable)
    for attempt in range(3):
        try:
            nodes = start_cluster(certs, base / f"cluster-{attempt}")
            break
        except PortInUseError:
            if attempt == 2:
                raise
    try:
        yield Secured(nodes, passwords, certs)
    finally:
        for server in nodes.values():
            server.stop()


# --- workers as the image runs them -----------------------------------------------------------


def compose_worker_env(secured: Secured, service: str = "worker") -> dict[str, str]:
    """compose.yaml's worker environment (or that of ``service``, run from the worker image),
    with the compose host names and container paths pointed at the loopback cluster and the
    dev certificates."""
    data = load_compose()
    worker = data["services"][service]
    env = {k: interpolate(str(v), secured.passwords) for k, v in worker["environment"].items()}
    for name in secured.nodes:
        env["JSWORKER_URL"] = env["JSWORKER_URL"].replace(f"tls://{name}:4222", secured.url(name))
    assert "nats-" not in env["JSWORKER_URL"], env["JSWORKER_URL"]
    mounted = {c["target"]: data["configs"][c["source"]]["file"] for c in worker["configs"]}
    env["JSWORKER_TLS_CA"] = str(secured.certs / Path(mounted[env["JSWORKER_TLS_CA"]]).name)
    return env


def provision_argv() -> list[str]:
    """The ``jsworker`` arguments of compose's provisioning step, with its container variables
    left for the caller's environment to fill (``$JSWORKER_APP``): its entrypoint is
    ``tini -- /bin/sh -c 'exec jsworker provision "$JSWORKER_APP"'``."""
    entrypoint = load_compose()["services"]["provision"]["entrypoint"]
    assert entrypoint[:4] == ["tini", "--", "/bin/sh", "-c"], entrypoint
    words = shlex.split(entrypoint[4].replace("$$", "$"))
    assert words[:2] == ["exec", "jsworker"], words
    return words[2:]


def run_compose_provision(env: dict[str, str], cwd: Path) -> str:
    """Run compose's provisioning step with ``env`` (the container's whole environment) and
    ``cwd`` (its WORKDIR), as compose does before the workers; its output."""
    argv = [env["JSWORKER_APP"] if word == "$JSWORKER_APP" else word for word in provision_argv()]
    done = subprocess.run(
        [sys.executable, "-m", "jsworker", *argv],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def image_env(app_dir: Path) -> dict[str, str]:
    """The worker image's ``ENV`` variables, its ``/app`` (where the app directory is copied)
    pointing at ``app_dir``."""
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    (line,) = [line for line in text.splitlines() if line.startswith("ENV ")]
    env = dict(word.split("=", 1) for word in shlex.split(line.removeprefix("ENV ")))
    assert env["PYTHONPATH"] == "/app", env
    env["PYTHONPATH"] = str(app_dir)
    return env


def image_worker_argv(app: str, metrics_port: int) -> list[str]:
    """The ``jsworker run`` arguments of a compose worker container, with its metrics port
    moved to ``metrics_port``: every replica of a container has 9400 on its own address."""
    argv = image_run_args(load_compose()["services"]["worker"]["command"], app)
    at = argv.index("--metrics-port")
    argv[at + 1] = str(metrics_port)
    return argv


@dataclass
class ImageWorker:
    proc: subprocess.Popen[bytes]
    metrics_port: int
    log: Path


def start_image_worker(env: dict[str, str], cwd: Path, log: Path, timeout: float = 30.0) -> ImageWorker:
    """A worker started with the image's command, ``env`` (the container's whole environment)
    and ``cwd`` (its WORKDIR), on a metrics port that was free a moment ago (another one if the worker finds
    it taken); returned once it serves its metrics and has logged ``worker.started``."""

    def start(port: int) -> ImageWorker:
        offset = log.stat().st_size if log.exists() else 0
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "jsworker", "run", *image_worker_argv(env["JSWORKER_APP"], port)],
                env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip

        wait_serving(proc, log, offset, port, timeout, logged=r'"event":\s*"worker\.started"')
        return ImageWorker(proc, port, log)

    return on_a_free_port(start)


# --- the operator's view of the streams -------------------------------------------------------


async def _js_api(secured: Secured, urls: list[str], subject: str) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(secured.ca))
    nc = await nats.connect(
        servers=urls,
        user=f"{APP}-operator",
        password=secured.password("operator"),
        tls=context,
        # The operator may only receive replies under its role's inbox prefix.
        inbox_prefix=f"_jsw_inbox.{APP}.operator",
        connect_timeout=2,
        max_reconnect_attempts=1,
        allow_reconnect=False,
    )
    try:
        reply = await nc.request(subject, b"", timeout=2)
    finally:
        await nc.close()
    answer: dict[str, Any] = json.loads(reply.data)
    return answer


def stream_info(secured: Secured, stream: str, nodes: list[str] | None = None) -> dict[str, Any]:
    """``$JS.API.STREAM.INFO.<stream>`` as the operator asks it (through ``nodes``, default all),
    the JSON answer as it is: config, state, and cluster (leader, replicas). Raises while no
    leader answers (nats-py's errors, TimeoutError, OSError)."""
    urls = [secured.url(name) for name in (nodes if nodes is not None else list(secured.nodes))]
    return asyncio.run(_js_api(secured, urls, f"$JS.API.STREAM.INFO.{stream}"))


# --- Prometheus -------------------------------------------------------------------------------


def binary(path: str) -> str:
    """A Prometheus tool at ``path``; skip (fail on CI) without it."""
    need(
        os.path.isfile(path) and os.access(path, os.X_OK),
        f"{path} not found: install Debian's prometheus package "
        "(apt-get install prometheus; .ci/run does it on CI)",
    )
    return path


@dataclass
class PrometheusAPI:
    prometheus: str  # base URL

    def api(self, path: str, **params: str) -> Any:
        url = f"{self.prometheus}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        return get_json(url, timeout=10)

    def query(self, expr: str) -> Any:
        return self.api("query", query=expr)

    def result(self, expr: str) -> list[dict[str, Any]]:
        """The result of an instant query that must succeed."""
        answer = self.query(expr)
        assert answer["status"] == "success", f"{expr}: {answer}"
        found: list[dict[str, Any]] = answer["data"]["result"]
        return found


def start_prometheus(config: Path, data: Path, log: Path, procs: list[launcher.Process]) -> PrometheusAPI:
    """Debian's Prometheus with ``config`` and its store in ``data``, on a free loopback port,
    once it is ready; its process is appended to ``procs`` (for the caller to stop) as soon as
    it is started."""
    prometheus = binary(PROMETHEUS)

    def start(port: int) -> PrometheusAPI:
        offset = log.stat().st_size if log.exists() else 0
        with open(log, "ab") as out:
            prom = subprocess.Popen(
                [prometheus, f"--config.file={config}", f"--storage.tsdb.path={data}",
                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        procs.append(prom)
        api = PrometheusAPI(f"http://127.0.0.1:{port}")

        def ready() -> bool:
            if prom.poll() is not None:
                exited(prom, log, offset, "address already in use", "prometheus")
            try:
                # The process answering is ours (not a system service): it runs on our store.
                return bool(api.api("status/flags")["data"]["storage.tsdb.path"] == str(data))
            except (OSError, ValueError, KeyError):
                return False

        wait_until(ready, timeout=30, message=f"prometheus to serve on port {port}")
        assert http_status(f"{api.prometheus}/-/ready") == 200
        return api

    return on_a_free_port(start)
