"""Reading the operations files (dashboard, alert rules, deployment) for the tests of tests/ops.

The tests check these files against the code: metric names against the Metrics class, worker
options against ``jsworker run``. Nothing here starts a process except :func:`run_help`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from jsworker._observability.metrics import Metrics

from ..support import need

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DASHBOARD = ROOT / "grafana" / "jsworker.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
PROMETHEUS_YML = DEPLOY / "prometheus" / "prometheus.yml"
COMPOSE = DEPLOY / "compose.yaml"
DOCKERFILE = DEPLOY / "worker.Dockerfile"
K8S = DEPLOY / "k8s"
APPS = Path(__file__).resolve().parent / "apps"

# --- YAML -------------------------------------------------------------------------------------


def load_yaml_all(path: Path) -> list[Any]:
    """Every document of a YAML file. PyYAML is not a dependency of the project yet, so say how
    to get it instead of erroring on the import."""
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        pytest.fail(
            "PyYAML is needed to check the deployment files but is not installed: "
            "pip install pyyaml (it belongs in the project's dev extra)",
            pytrace=False,
        )
    with open(path, encoding="utf-8") as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def load_yaml(path: Path) -> Any:
    """The single document of a YAML file."""
    docs = load_yaml_all(path)
    assert len(docs) == 1, f"{path} should hold one YAML document, has {len(docs)}"
    return docs[0]


def k8s_objects() -> list[dict[str, Any]]:
    """Every object of every manifest under deploy/k8s (kustomization.yaml is not one)."""
    objects = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            objects += load_yaml_all(path)
    return objects


def k8s_object(kind: str, name: str) -> dict[str, Any]:
    found = [o for o in k8s_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name} under deploy/k8s, found {len(found)}"
    return found[0]


# --- metric names -----------------------------------------------------------------------------

# How prometheus-client names the samples of each metric type.
_SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


@cache
def metric_families() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Every family the Metrics class defines: name -> (type, label names)."""
    metrics = Metrics(CollectorRegistry())
    families = {}
    for attr in vars(metrics).values():
        describe = getattr(attr, "describe", None)
        if describe is None:
            continue
        for family in describe():
            # describe() gives names and types but not label names: a metric object keeps
            # them, the per-task job collector lists them.
            labels = attr.LABELS[family.name] if hasattr(attr, "LABELS") else attr._labelnames
            families[family.name] = (family.type, tuple(labels))
    return families


@cache
def known_sample_names() -> frozenset[str]:
    """Every sample name /metrics can show for the Metrics class: counters with ``_total``,
    histograms as ``_bucket``/``_sum``/``_count``, gauges as they are (``_created`` left out:
    nothing should query it). Taken from the families a real registry collects."""
    registry = CollectorRegistry()
    Metrics(registry)
    names: set[str] = set()
    for family in registry.collect():
        assert family.type in _SUFFIXES, f"metric type {family.type} of {family.name}: extend _SUFFIXES"
        names.update(family.name + suffix for suffix in _SUFFIXES[family.type])
        # Unlabelled metrics already have samples: they must agree with the rule above.
        names_seen = {s.name for s in family.samples if not s.name.endswith("_created")}
        assert names_seen <= names, f"{family.name}: samples {names_seen} not covered by its type"
    return frozenset(names)


def family_of(sample_name: str) -> str:
    """The family a sample name belongs to."""
    families = metric_families()
    for suffix in ("_total", "_bucket", "_sum", "_count", ""):
        base = sample_name.removesuffix(suffix) if suffix else sample_name
        if base in families and sample_name in {base + s for s in _SUFFIXES[families[base][0]]}:
            return base
    raise KeyError(sample_name)


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_BRACES = re.compile(r"\{[^{}]*\}")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w.:$])[a-zA-Z_:][a-zA-Z0-9_:]*")
_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless"}
    | {"offset", "inf", "nan", "atan2"}
)
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*[a-zA-Z_]\w*\s*\)\s*$", re.S)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana label_values query) selects.

    Label matchers, strings, range durations and grouping clauses are removed first, so what
    is left as identifiers are metric names, function names (followed by a parenthesis) and
    keywords.
    """
    m = _LABEL_VALUES.match(expr)
    if m:
        expr = m.group(1)
    text = _STRING.sub('""', expr)
    text = _BRACES.sub("", text)
    text = _BRACKETS.sub("", text)
    text = _GROUPING.sub("", text)
    names = set()
    for ident in _IDENT.finditer(text):
        rest = text[ident.end() :].lstrip()
        if rest.startswith("(") or ident.group() in _KEYWORDS:
            continue
        names.add(ident.group())
    return names


_SELECTOR = re.compile(r"(?<![\w:])(jsworker_[a-zA-Z0-9_]+)\s*(\{[^{}]*\})?")


def selectors(expr: str) -> list[tuple[str, str]]:
    """(metric name, its label matchers text) of every jsworker selector in ``expr``."""
    return [(m.group(1), m.group(2) or "") for m in _SELECTOR.finditer(expr)]


# --- the dashboard ----------------------------------------------------------------------------


def dashboard() -> dict[str, Any]:
    with open(DASHBOARD, encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def panels(board: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every panel that shows data (rows' children included, rows themselves left out)."""
    board = board or dashboard()
    out = []
    for panel in board["panels"]:
        if panel["type"] == "row":
            out += panel.get("panels", [])
        else:
            out.append(panel)
    return out


def dashboard_targets() -> list[tuple[str, str, str]]:
    """(panel title, refId, expr) of every query of the dashboard."""
    return [
        (panel["title"], target["refId"], target["expr"])
        for panel in panels()
        for target in panel.get("targets", [])
        if target.get("expr")
    ]


def variable_queries() -> dict[str, str]:
    """name -> label_values(...) query of the dashboard's query variables."""
    out = {}
    for var in dashboard()["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]
            out[var["name"]] = query["query"] if isinstance(query, dict) else query
    return out


_VARIABLE = re.compile(r"\$\{?(queue|task)(?::[a-z]+)?\}?|\[\[(queue|task)\]\]")


def concrete(expr: str, rate_interval: str = "1m") -> str:
    """``expr`` as Grafana would send it with every queue and task selected: ``$queue`` and
    ``$task`` become ``.*`` (their allValue) and ``$__rate_interval`` a fixed range."""
    out = expr.replace("$__rate_interval", rate_interval).replace("${__rate_interval}", rate_interval)
    out = _VARIABLE.sub(".*", out)
    assert "$" not in out, f"a variable left in {out!r}"
    return out


# --- alert rules ------------------------------------------------------------------------------


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in load_yaml(ALERTS)["groups"] for rule in group["rules"]]


def strings_in(node: Any) -> list[str]:
    """Every string in a parsed YAML/JSON tree, keys included."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in strings_in(k) + strings_in(v)]
    if isinstance(node, list):
        return [s for item in node for s in strings_in(item)]
    return []


# --- worker commands --------------------------------------------------------------------------


@cache
def run_help_options() -> frozenset[str]:
    """The options ``jsworker run --help`` lists (long and short forms)."""
    out = subprocess.run(
        [sys.executable, "-m", "jsworker", "run", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=ROOT,
    ).stdout
    section = out.split("Options:", 1)[1]
    return frozenset(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", section))


def options_in(argv: list[str]) -> list[str]:
    """The option names in an argument list (``--x=1`` counts as ``--x``)."""
    return [arg.split("=", 1)[0] for arg in argv if arg.startswith("-") and arg not in ("-", "--")]


def parse_run(argv: list[str]) -> dict[str, Any]:
    """The parameters ``jsworker run`` would get from ``argv`` (the arguments after ``run``):
    click parses them exactly as the command would, without running it."""
    from jsworker._cli.run import run

    env_port = os.environ.pop("JSWORKER_METRICS_PORT", None)  # only the files' own options count
    try:
        with run.make_context("run", list(argv)) as ctx:
            return dict(ctx.params)
    finally:
        if env_port is not None:
            os.environ["JSWORKER_METRICS_PORT"] = env_port


def dockerfile_instruction(name: str) -> list[str]:
    """The exec-form (JSON) arguments of a Dockerfile instruction such as ENTRYPOINT or CMD."""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        if line.startswith(name + " "):
            value: list[str] = json.loads(line[len(name) :].strip())
            return value
    raise AssertionError(f"no {name} in {DOCKERFILE}")


def image_run_args(container_args: list[str], app: str) -> list[str]:
    """The ``jsworker run`` arguments the worker image runs with ``container_args`` appended
    (its ENTRYPOINT is ``tini -- /bin/sh -c 'exec jsworker run "$JSWORKER_APP" ... "$@"' jsworker``)."""
    entrypoint = dockerfile_instruction("ENTRYPOINT")
    script = entrypoint[entrypoint.index("-c") + 1]
    words = shlex.split(script)
    words = words[words.index("run") + 1 :]
    out = []
    for word in words:
        if word == "$@":
            out += container_args
        else:
            out.append(word.replace("$JSWORKER_APP", app))
    return out


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


def seconds(duration: str | int | float) -> float:
    """A compose duration (``45s``, ``1m30s``) or a number of seconds, in seconds."""
    if isinstance(duration, int | float):
        return float(duration)
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    parts = _DURATION.findall(duration)
    assert "".join(n + u for n, u in parts) == duration, f"not a duration: {duration!r}"
    return sum(float(n) * scale[u] for n, u in parts)


# --- security: NATS configs, certificates, secrets --------------------------------------------

NATS_DIR = DEPLOY / "nats"
AUTH_CONF = NATS_DIR / "auth.conf"
TLS_DIR = DEPLOY / "tls"
MAKE_DEV_CERTS = TLS_DIR / "make-dev-certs.sh"
ENV_EXAMPLE = DEPLOY / "env.example"
GITIGNORE = ROOT / ".gitignore"
# What make-dev-certs.sh writes.
DEV_CERT_FILES = ("ca.pem", "ca.key", "server.pem", "server.key")
# Where the configs expect the TLS files inside the nats containers (compose and Kubernetes).
CONTAINER_TLS_DIR = "/etc/nats/tls"


def without_leading_comments(text: str) -> str:
    """``text`` without the ``#`` comment lines it starts with."""
    lines = text.splitlines(keepends=True)
    while lines and lines[0].lstrip().startswith("#"):
        lines.pop(0)
    return "".join(lines)


@cache
def permissions_output(*apps: str) -> str:
    """What ``jsworker permissions APP...`` prints (the command itself, as a user runs it)."""
    result = subprocess.run(
        [sys.executable, "-m", "jsworker", "permissions", *apps],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def password_variables(auth: str) -> dict[str, str]:
    """user -> the environment variable its password comes from, in an authorization block."""
    found = dict(re.findall(r'user:\s*"([^"]+)",\s*password:\s*\$([A-Z][A-Z0-9_]*)', auth))
    assert found, "no user with a password from the environment"
    return found


def made_up_passwords(variables: list[str] | set[str]) -> dict[str, str]:
    """A value per password variable, made the way deploy/README.md says (hex)."""
    import secrets

    return {name: secrets.token_hex(24) for name in sorted(variables)}


def strip_conf_comments(text: str) -> str:
    """A nats-server config without its ``#`` and ``//`` comments (quoted text kept as is)."""
    out = []
    for line in text.splitlines():
        quote = ""
        for i, ch in enumerate(line):
            if quote:
                quote = "" if ch == quote else quote
            elif ch in "\"'":
                quote = ch
            elif ch == "#" or line.startswith("//", i):
                line = line[:i]
                break
        out.append(line)
    return "\n".join(out)


def conf_blocks(text: str) -> dict[str, str]:
    """name -> body of every ``name { ... }`` block at the top level of a (comment-free) config;
    call it again on a body for the blocks inside."""
    blocks: dict[str, str] = {}
    depth, start, name, quote = 0, 0, "", ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "{":
            if depth == 0:
                found = re.search(r"([A-Za-z_][\w-]*)\s*[:=]?\s*$", text[:i])
                name, start = (found.group(1) if found else ""), i + 1
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0 and name:
                assert name not in blocks, f"block {name} twice"
                blocks[name] = text[start:i]
    assert depth == 0, "unbalanced braces"
    return blocks


def top_level(text: str) -> str:
    """A config with every block's body removed: what is left are its top-level settings."""
    out, depth = [], 0
    for ch in text:
        if ch == "}":
            depth -= 1
        if depth == 0:
            out.append(ch)
        if ch == "{":
            depth += 1
    return "".join(out)


def expand_includes(text: str, files: dict[str, str]) -> str:
    """``text`` with every ``include ./name`` replaced by ``files[name]`` (recursively), as
    nats-server reads it; ``files`` are the config files beside it."""

    def include(match: re.Match[str]) -> str:
        name = match.group(1).removeprefix("./")
        assert name in files, f"include of {name}, which is not beside the config"
        return expand_includes(files[name], files)

    return re.sub(r'^\s*include\s+"?([^"\s;]+)"?;?\s*$', include, text, flags=re.M)


def compose_nats_files() -> dict[str, str]:
    """The files of deploy/nats by name."""
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(NATS_DIR.glob("*.conf"))}


def k8s_nats_files() -> dict[str, str]:
    """The files the nats ConfigMap puts beside nats.conf."""
    from typing import cast

    config_map = k8s_object("ConfigMap", "nats-config")
    return dict(cast(dict[str, str], config_map["data"]))


def copy_configs(files: dict[str, str], dest: Path, tls_dir: Path, tls_names: dict[str, str]) -> Path:
    """Write ``files`` into ``dest`` with the container TLS paths pointing at ``tls_dir``;
    ``tls_names`` maps the file names the configs use to those in ``tls_dir``."""
    dest.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        for used, real in tls_names.items():
            text = text.replace(f"{CONTAINER_TLS_DIR}/{used}", str(tls_dir / real))
        assert CONTAINER_TLS_DIR not in strip_conf_comments(text), (
            f"{name}: a TLS file the test does not know"
        )
        (dest / name).write_text(text, encoding="utf-8")
    return dest


# The names compose (the dev script's) and Kubernetes (cert-manager's) give the TLS files.
COMPOSE_TLS_NAMES = {"server.pem": "server.pem", "server.key": "server.key", "ca.pem": "ca.pem"}
K8S_TLS_NAMES = {"tls.crt": "server.pem", "tls.key": "server.key", "ca.crt": "ca.pem"}


def run_make_dev_certs(out: Path, namespace: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run deploy/tls/make-dev-certs.sh into ``out`` (never into the repository)."""
    import shutil

    for tool in ("bash", "openssl"):
        need(shutil.which(tool) is not None, f"{tool} is needed to make the dev certificates")
    env = {k: v for k, v in os.environ.items() if k not in ("NAMESPACE", "DAYS")}
    if namespace is not None:
        env["NAMESPACE"] = namespace
    result = subprocess.run(
        ["bash", str(MAKE_DEV_CERTS), str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=out.parent,
    )
    assert result.returncode == 0, f"make-dev-certs.sh failed:\n{result.stdout}{result.stderr}"
    return result


_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?[?-][^}]*)?\}")


def compose_variables(value: str) -> list[str]:
    """The variables a compose value interpolates."""
    return [m.group(1) for m in _INTERPOLATION.finditer(value)]


def is_required_variable(value: str) -> str | None:
    """The variable if ``value`` is exactly ``${VAR:?message}`` (compose stops when it is unset
    or empty), else None."""
    found = re.fullmatch(r"\$\{([A-Za-z_][A-Za-z0-9_]*):\?[^}]+\}", value)
    return found.group(1) if found else None


def interpolate(value: str, env: dict[str, str]) -> str:
    """A compose value with its variables replaced from ``env`` (all must be there)."""
    return _INTERPOLATION.sub(lambda m: env[m.group(1)], value)
