"""The typed public API and lint rules hold on every run, not only when someone remembers."""

from __future__ import annotations

import shutil
import subprocess
import sys
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


def test_mypy_strict_is_clean() -> None:
    """``mypy --strict jsworker`` reports nothing."""
    result = subprocess.run(
        [*_tool("mypy"), "--strict", "jsworker"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_is_clean() -> None:
    """``ruff check`` and ``ruff format --check`` report nothing."""
    for args in (["check", "."], ["format", "--check", "."]):
        result = subprocess.run(
            [*_tool("ruff"), *args], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stdout + result.stderr
