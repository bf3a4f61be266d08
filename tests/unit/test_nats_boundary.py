"""Only jsworker/jetstream/ talks to nats-py: everything else goes through its primitives.

Read from the source (``ast``), so a module nobody imports in a test is checked too.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "jsworker"
BOUNDARY = PACKAGE / "jetstream"
# The nats-py objects a Connection hands out; outside the boundary nothing reaches for them.
CLIENT_ATTRIBUTES = {"nc", "js"}
# Modules outside jetstream/ still allowed to use nats-py (path under jsworker/: why). Empty:
# keep it so; an entry is a debt, and the test below fails once it is paid.
ALLOWED: dict[str, str] = {}


def _modules() -> dict[str, ast.Module]:
    """Every module of the package outside jetstream/, by path under jsworker/."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if not path.is_relative_to(BOUNDARY):
            found[path.relative_to(PACKAGE).as_posix()] = ast.parse(path.read_text(), str(path))
    return found


def _is_nats(module: str) -> bool:
    return module == "nats" or module.startswith("nats.")


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import statement names (none for a relative one)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level == 0 and node.module:
        return [node.module]
    return []


def _nats_imports(tree: ast.Module) -> list[str]:
    """The imports of nats-py anywhere in ``tree`` (functions and TYPE_CHECKING blocks too)."""
    return [
        f"line {node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom) and any(map(_is_nats, _imported(node)))
    ]


def _client_uses(tree: ast.Module) -> list[str]:
    """Reads of a connection's nats-py client (``conn.nc``, ``conn.js``) in ``tree``."""
    return [
        f"line {node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in CLIENT_ATTRIBUTES
    ]


def test_the_package_is_read() -> None:
    modules = _modules()
    assert "_lifecycle/waiter.py" in modules and "_app.py" in modules
    assert not any(path.startswith("jetstream/") for path in modules)


def test_only_jetstream_imports_nats() -> None:
    offending = {
        path: imports
        for path, tree in _modules().items()
        if path not in ALLOWED and (imports := _nats_imports(tree))
    }
    assert offending == {}, "use (or add) a primitive in jsworker/jetstream/ instead"


def test_only_jetstream_reaches_for_the_nats_client() -> None:
    offending = {
        path: uses
        for path, tree in _modules().items()
        if path not in ALLOWED and (uses := _client_uses(tree))
    }
    assert offending == {}, "use (or add) a primitive in jsworker/jetstream/ instead"


def test_every_allowed_module_still_needs_it() -> None:
    modules = _modules()
    for path in ALLOWED:
        assert _nats_imports(modules[path]) or _client_uses(modules[path]), f"{path} no longer uses nats-py"


def test_the_checks_see_an_import_and_a_client_use() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from nats.aio.msg import Msg\n"
        "def f(conn):\n    import nats.errors\n    return conn.js.stream_info('s')\n"
        "import natsort\nfrom .nats import x\n"
    )
    assert [line.split(":")[0] for line in _nats_imports(tree)] == ["line 3", "line 5"]
    assert _client_uses(tree) == ["line 6: conn.js"]
