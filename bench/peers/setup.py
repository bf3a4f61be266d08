"""The peers' virtualenv (``bench/.peers-venv``) and Debian's redis-server.

Peer task queues live in their own virtualenv so they never touch jsworker's dependencies.
Versions are pinned to the ones measured; the venv is reused while the pins are unchanged.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

VENV = Path(__file__).resolve().parent.parent / ".peers-venv"
PINS = [
    "taskiq==0.13.0",
    "taskiq-nats==0.7.0",
    "nats-py==2.16.0",
    "dramatiq[redis]==2.2.1",
    "redis==8.1.0",
]
_MARKER = VENV / "bench-pins.txt"


def python() -> Path:
    """The peers' interpreter."""
    return VENV / "bin" / "python"


def ensure_venv() -> Path:
    """Create or update the peers' virtualenv; its bin directory."""
    wanted = "\n".join(PINS)
    if _MARKER.exists() and _MARKER.read_text() == wanted and python().exists():
        return VENV / "bin"
    print(f"installing peers into {VENV.name}: {', '.join(PINS)}", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=300)
    subprocess.run(
        [str(python()), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PINS],
        check=True,
        timeout=900,
    )
    _MARKER.write_text(wanted)
    return VENV / "bin"


def ensure_redis() -> str:
    """Path of ``redis-server``, installed from Debian packages when missing (needs root)."""
    found = shutil.which("redis-server")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise RuntimeError("redis-server not found: install it (apt-get install -y redis-server)")
    print("installing redis-server from Debian packages", file=sys.stderr, flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, timeout=600, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "redis-server"], check=True, timeout=900, env=env)
    found = shutil.which("redis-server")
    if not found:
        raise RuntimeError("redis-server still not found after apt-get install")
    return found


if __name__ == "__main__":
    ensure_redis()
    print(ensure_venv())
