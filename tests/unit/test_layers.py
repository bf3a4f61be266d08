"""Imports point downward: every module of the package sits on a layer by its path and imports
only from its own layer or the ones under it, and no modules import each other in a loop.

The layers, from the ground up (docs/project-layout.md):

0. base: the exceptions (``_errors.py``), option fields (``_config.py``), the release, the
   running job's context (``_current.py``), logs and metrics (``_observability/``), the wire
   format's names and headers (``_wire/``); what every layer speaks, knowing neither NATS nor
   apps;
1. ``jetstream/``: the only code that talks to NATS (private, as every module of the package
   outside the public ones, though its name, the layer's, has no underscore);
2. core: what the app is made of (``_core/``; the App itself, ``_app.py``), the enqueue side
   (``_enqueue/``), rate and partition limits and fair turns (``_limits/``), the worker
   registry (``_registry/``);
3. features: ``_scheduling/``, ``_lifecycle/``, ``_deadletters/``, ``events/``, ``workflows/``;
4. runtime: ``_runtime/`` (the worker), ``_fleet/`` (many worker processes), ``_server/``
   (local nats-server processes for ``jsworker dev`` and the tests);
5. faces: what people and other programs drive jsworker from: ``_cli/``, ``admin/``,
   ``spark/``, ``testing/`` (pytest fixtures), ``contrib/`` (integrations), ``ui/`` (the web
   dashboard), ``__main__.py``.

``jsworker/__init__.py`` is the package's facade: it may import anything, and nothing inside
the package may import it. Imports under ``if TYPE_CHECKING:`` and inside functions count: an
annotation is an import too, and what annotates with ``App`` is tied to everything ``App``
imports. Where a lower module needs an app it names an :class:`~jsworker._core.view.AppView`.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import jsworker

PACKAGE = Path(jsworker.__file__).parent
ROOT = PACKAGE.parent
FACADE = "jsworker/__init__.py"

BASE, JETSTREAM, CORE, FEATURES, RUNTIME, FACES = range(6)
NAMES = ("base", "jetstream", "core", "features", "runtime", "faces")

# Top-level modules of the base; the facade and __main__.py aside, every other module is in a folder.
BASE_MODULES = {"_errors.py", "_config.py", "_version.py", "_current.py"}
FOLDERS = {
    "_observability": BASE,
    "_wire": BASE,
    "jetstream": JETSTREAM,
    "_core": CORE,
    "_enqueue": CORE,
    "_limits": CORE,
    "_registry": CORE,
    "_scheduling": FEATURES,
    "_lifecycle": FEATURES,
    "_deadletters": FEATURES,
    "events": FEATURES,
    "workflows": FEATURES,
    "_runtime": RUNTIME,
    "_fleet": RUNTIME,
    "_server": RUNTIME,
    "_cli": FACES,
    "admin": FACES,
    "spark": FACES,
    "testing": FACES,
    "contrib": FACES,
    "ui": FACES,
}
TOP_LEVEL_FACES = {"__main__.py"}

# The composition roots: the only modules that may import from a layer above their own, each
# up to the layer given, and why. Keep this list short.
COMPOSITION_ROOTS = {
    "jsworker/_app.py": (
        FEATURES,
        "the App is where the features join the core: it gives the producer the scheduling "
        "feature's way of storing delayed jobs and the job events' enqueue hook, holds the "
        "lifecycle feature as its jobs' results, status and cancels, declares periodic "
        "schedules, and lists every feature's streams among its own",
    ),
}

# Edges that break the rule in modules this change could not edit (another piece of work has
# them open); each says the fix. The list only shrinks: a test fails once an entry is gone.
PENDING: dict[tuple[str, str], str] = {}
PENDING_CYCLES: dict[frozenset[str], str] = {}


def _modules() -> dict[str, Path]:
    """Every module of the package by its path from the repository root."""
    return {p.relative_to(ROOT).as_posix(): p for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = _modules()


def layer(path: str) -> int | None:
    """The layer of the module at ``path`` (None: the facade, or a folder with none yet)."""
    parts = path.split("/")[1:]
    if path == FACADE:
        return None
    if len(parts) == 1:
        if parts[0] in BASE_MODULES:
            return BASE
        return FACES if parts[0] in TOP_LEVEL_FACES else CORE
    return FOLDERS.get(parts[0])


def _target(name: str) -> str | None:
    """The module file that the dotted ``name`` names, or the package it is in."""
    while name.startswith("jsworker"):
        base = name.replace(".", "/")
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if candidate in MODULES:
                return candidate
        name = name.rpartition(".")[0]
    return None


def imports(path: str) -> Iterator[tuple[str, int]]:
    """(module imported, line) for every import of a module of the package in ``path``."""
    package = path.rpartition("/")[0].replace("/", ".")
    tree = ast.parse(MODULES[path].read_text(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join([*base, node.module] if node.module else base)
            else:
                origin = node.module or ""
            # `from . import wire` imports a module; `from .job import Job` a name of one.
            names = [f"{origin}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            found = _target(name)
            if found is not None and found != path:
                yield found, node.lineno


@functools.cache
def edges() -> dict[tuple[str, str], int]:
    """Every import between the package's modules: (importer, imported) -> line. Read when a
    test asks (every test process collects this module; few run its tests)."""
    return {(path, target): line for path in MODULES for target, line in imports(path)}


def test_every_module_has_a_layer() -> None:
    """A new folder is placed on purpose: add it to FOLDERS and to docs/project-layout.md."""
    unplaced = [path for path in MODULES if path != FACADE and layer(path) is None]
    assert unplaced == []


def test_imports_point_downward() -> None:
    upward = []
    for (source, target), line in sorted(edges().items()):
        if target == FACADE or (source, target) in PENDING:
            continue
        mine, theirs = layer(source), layer(target)
        if source == FACADE or mine is None or theirs is None or theirs <= mine:
            continue
        allowed = COMPOSITION_ROOTS.get(source, (mine, ""))[0]
        if theirs > allowed:
            upward.append(f"{source}:{line} ({NAMES[mine]}) imports {target} ({NAMES[theirs]})")
    assert upward == [], "an import runs back up: give the lower module a protocol or a hook"


def test_nothing_inside_the_package_imports_its_facade() -> None:
    found = [
        f"{source}:{line}"
        for (source, target), line in sorted(edges().items())
        if target == FACADE and (source, target) not in PENDING
    ]
    assert found == [], "import the defining module (jsworker._version for __version__)"


def _cycles() -> list[frozenset[str]]:
    """The package's modules that import each other in a loop, one set per loop (Tarjan)."""
    graph: dict[str, list[str]] = {path: [] for path in MODULES}
    for source, target in edges():
        graph[source].append(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.add(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(frozenset(members))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_modules_import_each_other_in_a_loop() -> None:
    loops = [sorted(loop) for loop in _cycles() if loop not in PENDING_CYCLES]
    assert loops == [], "break the loop with a protocol where the lower module annotates"


def test_the_pending_list_only_shrinks() -> None:
    """An entry whose module no longer breaks the rule is struck from PENDING."""
    fixed = [f"{a} -> {b}" for a, b in PENDING if a in MODULES and (a, b) not in edges()]
    fixed += [" <-> ".join(sorted(loop)) for loop in PENDING_CYCLES if loop not in _cycles()]
    assert fixed == []
