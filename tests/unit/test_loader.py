"""Finding the App that `jsworker run MODULE[:ATTR]` names."""

from __future__ import annotations

import importlib
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jsworker import App
from jsworker._cli.loader import AppNotFound, load_app

ONE_APP = """
from jsworker import App
app = App("loaded", "nats://127.0.0.1:1")

@app.task
def hello(name: str) -> str:
    return name
"""

TWO_APPS = """
from jsworker import App
first = App("first", "nats://127.0.0.1:1")
second = App("second", "nats://127.0.0.1:1")
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str], str]]:
    """A fresh project directory as cwd; yields a writer of modules; cleans sys.path/sys.modules."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    before = set(sys.modules)
    counter = iter(range(1000))

    def write(source: str, stem: str = "jsw_unit_mod") -> str:
        name = f"{stem}_{next(counter)}_{tmp_path.name.replace('-', '_')}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        importlib.invalidate_caches()
        return name

    yield write
    for name in set(sys.modules) - before:
        if name.startswith("jsw_unit_"):
            del sys.modules[name]


def test_module_with_one_app(project: Callable[[str], str]) -> None:
    """MODULE with exactly one App returns it, found from the current directory."""
    mod = project(ONE_APP)
    app = load_app(mod)
    assert isinstance(app, App)
    assert app.name == "loaded"
    assert "hello" in app.tasks


def test_module_colon_attr(project: Callable[[str], str]) -> None:
    """MODULE:ATTR picks the named App even when there are several."""
    mod = project(TWO_APPS)
    assert load_app(f"{mod}:second").name == "second"
    assert load_app(f"{mod}:first").name == "first"


def test_package_submodule(project: Callable[..., str], tmp_path: Path) -> None:
    """A dotted MODULE inside a package of the current directory is importable."""
    pkg = project("", "jsw_unit_pkg")
    (tmp_path / f"{pkg}.py").unlink()
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / pkg / "tasks.py").write_text(textwrap.dedent(ONE_APP))
    importlib.invalidate_caches()
    assert load_app(f"{pkg}.tasks").name == "loaded"


def test_missing_module(project: Callable[[str], str]) -> None:
    """A module that does not exist is AppNotFound naming it."""
    with pytest.raises(AppNotFound, match=r"cannot import module 'jsw_unit_nowhere'"):
        load_app("jsw_unit_nowhere")


def test_empty_module_name() -> None:
    """A spec with no module part is refused with a usage hint."""
    with pytest.raises(AppNotFound, match="expected MODULE or MODULE:ATTR"):
        load_app(":app")


def test_module_with_no_app(project: Callable[[str], str]) -> None:
    """A module without any App is AppNotFound saying so."""
    mod = project("VALUE = 1\n")
    with pytest.raises(AppNotFound, match=f"module '{mod}' has no jsworker App"):
        load_app(mod)


def test_module_with_two_apps(project: Callable[[str], str]) -> None:
    """A module with two Apps and no ATTR is AppNotFound listing both names."""
    mod = project(TWO_APPS)
    with pytest.raises(AppNotFound, match=r"several Apps \(first, second\)") as info:
        load_app(mod)
    assert f"{mod}:ATTR" in str(info.value)


@pytest.mark.parametrize(
    ("attr", "says"),
    [
        ("VALUE", "is a int, not a jsworker App; its Apps: app"),
        ("App", "is a type, not a jsworker App; its Apps: app"),
        ("missing", "has no attribute 'missing'; its Apps: app"),
        ("ap", "has no attribute 'ap'; its Apps: app"),
    ],
)
def test_attr_that_is_not_an_app(project: Callable[[str], str], attr: str, says: str) -> None:
    """MODULE:ATTR naming something that is not an App instance is AppNotFound, saying what the
    name is (or that it does not exist) and which Apps the module has."""
    mod = project("from jsworker import App\nVALUE = 1\napp = App('x', 'nats://127.0.0.1:1')\n")
    with pytest.raises(AppNotFound, match=re.escape(says)):
        load_app(f"{mod}:{attr}")


def test_module_whose_import_raises(project: Callable[[str], str]) -> None:
    """An exception while importing becomes AppNotFound with the error's type and message."""
    mod = project("raise RuntimeError('config missing')\n")
    with pytest.raises(AppNotFound, match=r"importing .* failed: RuntimeError: config missing") as info:
        load_app(mod)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_module_with_missing_dependency(project: Callable[[str], str]) -> None:
    """A module importing a missing package is reported as an import failure, not as missing."""
    mod = project("import jsw_unit_absent_dependency\n")
    with pytest.raises(AppNotFound, match=f"importing '{mod}' failed") as info:
        load_app(mod)
    assert "jsw_unit_absent_dependency" in str(info.value)


def test_module_with_syntax_error(project: Callable[[str], str]) -> None:
    """A module that does not compile is AppNotFound, not a raw SyntaxError."""
    mod = project("def broken(:\n")
    with pytest.raises(AppNotFound, match="SyntaxError"):
        load_app(mod)


def test_current_directory_is_put_on_sys_path(project: Callable[[str], str], tmp_path: Path) -> None:
    """load_app makes the current directory importable, as `python -m` would."""
    mod = project(ONE_APP)
    assert str(tmp_path) not in sys.path
    load_app(mod)
    assert sys.path[0] == str(tmp_path)
