"""How the suite runs in parallel (tests/conftest.py) and the command that runs it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc

from ..conftest import TESTS, rewrite_test_modules, unit_of

ROOT = TESTS.parent

# Module- or session-scoped fixtures that are cheap to set up once in every test process that
# needs them, and why.
CHEAP_TO_REPEAT = {
    # make-dev-certs.sh: a few openssl calls.
    "tests/ops/conftest.py",
    # Reads the binaries .ci/old-servers put in the cache.
    "tests/integration/test_server_versions.py",
}

_SHARED_FIXTURE = re.compile(r"scope=\"(?:module|session)\"|\bnats_(?:server|cluster)_module\b")


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_every_module_sharing_a_costly_fixture_runs_as_one_unit() -> None:
    """A module whose tests share a fixture started once per module or session must be in
    RUN_TOGETHER: a parallel run would otherwise start it in every process."""
    sharing = {
        _relative(path)
        for path in TESTS.rglob("*.py")
        if _SHARED_FIXTURE.search(path.read_text(encoding="utf-8")) and path.parent != Path(__file__).parent
    }
    scattered = {module for module in sharing - CHEAP_TO_REPEAT if unit_of(f"{module}::t") == f"{module}::t"}
    assert not scattered, f"add to RUN_TOGETHER in tests/conftest.py (or CHEAP_TO_REPEAT here): {scattered}"
    assert sharing >= CHEAP_TO_REPEAT, "CHEAP_TO_REPEAT names a module without such a fixture"


def test_units_keep_shared_modules_together_and_other_tests_apart() -> None:
    spark = unit_of("tests/spark/test_writer.py::test_a[1]")
    assert spark == unit_of("tests/spark/test_events_source.py::test_b")
    assert unit_of("tests/ops/test_prometheus.py::test_x") == "tests/ops/test_prometheus.py"
    assert unit_of("tests/unit/test_options.py::test_x") == "tests/unit/test_options.py::test_x"


def _readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"# 2\. run the tests.*\n(.+)\n", readme)
    assert found, "README.md has no '# 2. run the tests' command"
    return found.group(1).strip()


def test_ci_runs_exactly_the_readme_command_in_parallel() -> None:
    """.ci/run ends with the README's test command, which runs the suite in parallel."""
    command = _readme_test_command()
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert [line for line in ci if line and not line.startswith("#")][-1] == command
    assert re.search(r"pytest -n \d+\b", command), command


def test_test_modules_are_rewritten_once_where_no_process_may_write_bytecode(
    pytestconfig: pytest.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under PYTHONDONTWRITEBYTECODE, the run's first process writes the rewritten bytecode of
    every test module and conftest for the test processes to read; other modules are not
    pytest's to rewrite, and a module changed since is rewritten again."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    (tmp_path / "deep").mkdir()
    modules = [tmp_path / "test_a.py", tmp_path / "deep" / "test_b.py", tmp_path / "conftest.py"]
    for module in modules:
        module.write_text("def test_x() -> None:\n    assert 1 + 1 == 2\n")
    (tmp_path / "helpers.py").write_text("X = 1\n")

    def rewritten(module: Path) -> bool:
        return _read_pyc(module, module.parent / "__pycache__" / (module.stem + PYC_TAIL)) is not None

    rewrite_test_modules(pytestconfig, tmp_path)
    assert [rewritten(m) for m in modules] == [True, True, True]
    assert not (tmp_path / "__pycache__" / ("helpers" + PYC_TAIL)).exists()
    modules[0].write_text("def test_x() -> None:\n    assert 2 + 2 == 4\n")
    assert not rewritten(modules[0])
    rewrite_test_modules(pytestconfig, tmp_path)
    assert rewritten(modules[0])
