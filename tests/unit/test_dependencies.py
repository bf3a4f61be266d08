"""Dependency bounds: a lower bound on every runtime dependency, and the worker image's pinned
versions inside the ranges the package declares."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).parents[2]
LOCK = ROOT / "deploy" / "requirements.lock"


def _dependencies() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(spec) for spec in project["dependencies"]]


def _pinned() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in LOCK.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not pinned: {line}"
            pins[canonicalize_name(name)] = version
    return pins


def test_every_runtime_dependency_has_a_lower_bound() -> None:
    for requirement in _dependencies():
        assert any(s.operator in (">=", "==", "~=") for s in requirement.specifier), requirement


def test_nats_py_has_an_upper_bound_since_its_internals_are_used() -> None:
    (nats,) = [r for r in _dependencies() if r.name == "nats-py"]
    assert any(s.operator == "<" for s in nats.specifier), nats


def test_the_image_pins_every_dependency_within_its_range() -> None:
    pins = _pinned()
    for requirement in _dependencies():
        version = pins.get(canonicalize_name(requirement.name))
        assert version is not None, f"{requirement.name} is not pinned in {LOCK.name}"
        assert requirement.specifier.contains(version), (
            f"{requirement.name}=={version} is outside {requirement}"
        )
