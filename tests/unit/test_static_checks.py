"""The typed public API and lint rules hold on every run, not only when someone remembers."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def _tool(name: str) -> list[str]:
    # Prefer the tool installed next to the running interpreter (the project's venv).
    local = Path(sys.executable).parent / name
    if local.exists():
        return [str(local)]
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed; install the dev extra: pip install -e '.[dev]'")
    return [found]


def _mypy_config() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        config: dict[str, object] = tomllib.load(f)["tool"]["mypy"]
    return config


def test_mypy_checks_the_package_and_the_tests_strictly() -> None:
    """pyproject's ``[tool.mypy]`` is what both ``mypy`` and this test check: it must name the
    tests as well as the package, strictly, or the tests' typing drifts unnoticed again."""
    config = _mypy_config()
    assert config.get("strict") is True
    assert config.get("files") == ["jsworker", "tests"]


def test_mypy_is_clean() -> None:
    """``mypy`` on what pyproject configures (no paths given, so none can differ) reports nothing."""
    result = subprocess.run([*_tool("mypy")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    # The summary counts the files checked: a mypy that did not read pyproject (or a tree it
    # skips) would say so here rather than pass on less.
    files = _mypy_config()["files"]
    assert isinstance(files, list)
    expected = sum(1 for top in files for _ in (ROOT / top).rglob("*.py"))
    summary = re.search(r"no issues found in (\d+) source files", result.stdout)
    assert summary is not None and int(summary[1]) == expected, result.stdout


def test_ruff_is_clean() -> None:
    """``ruff check`` and ``ruff format --check`` report nothing."""
    for args in (["check", "."], ["format", "--check", "."]):
        result = subprocess.run(
            [*_tool("ruff"), *args], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stdout + result.stderr
