"""A command started from the process template answers as a fresh ``python -m jsworker``:
same output, same exit code, its own environment and working directory, killed by pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .. import launcher
from ..support import wait_until

COMMANDS = [
    ["--help"],
    ["status", "no_such_module_xyz"],  # exits 2 with one error line
    ["queues", "--help"],
]


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_a_command_answers_as_a_fresh_interpreter(argv: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "JSWORKER_URL": "nats://127.0.0.1:1"}
    fresh = subprocess.run(
        [sys.executable, "-m", "jsworker", *argv],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    forked = launcher.run(argv, env=env, cwd=tmp_path, timeout=60)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_warnings_asked_for_in_the_environment_are_shown_as_by_a_fresh_interpreter(tmp_path: Path) -> None:
    (tmp_path / "warning_app.py").write_text(
        "import warnings\nwarnings.warn('left open', ResourceWarning)\nraise SystemExit(0)\n"
    )
    outputs = []
    for shown in ("", "always::ResourceWarning"):
        env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONWARNINGS": shown}
        fresh = subprocess.run(
            [sys.executable, "-m", "jsworker", "run", "warning_app"],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        forked = launcher.run(["run", "warning_app"], env=env, cwd=tmp_path, timeout=60)
        assert (forked.returncode, forked.stderr) == (fresh.returncode, fresh.stderr)
        outputs.append(forked.stderr)
    assert "ResourceWarning: left open" not in outputs[0]
    assert "ResourceWarning: left open" in outputs[1]


def test_the_child_has_the_commands_environment_path_and_directory(tmp_path: Path) -> None:
    # An app module only the child's PYTHONPATH finds, which reports what the child sees.
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "seen_app.py").write_text(
        "import os, sys\n"
        "print('cwd', os.getcwd())\n"
        "print('marker', os.environ.get('LAUNCHER_MARKER'))\n"
        "print('path0', sys.path[0])\n"
        "raise SystemExit(7)\n"
    )
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(apps), "LAUNCHER_MARKER": "here"}
    done = launcher.run(["run", "seen_app"], env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 7, done.stderr
    assert done.stdout.splitlines() == [f"cwd {tmp_path}", "marker here", f"path0 {tmp_path}"]


def test_a_started_process_is_stopped_by_its_pid(tmp_path: Path) -> None:
    # Up until a signal ends it.
    (tmp_path / "waiting_app.py").write_text("import signal\nprint('up', flush=True)\nsignal.pause()\n")
    log = tmp_path / "out.log"
    proc = launcher.start(["run", "waiting_app"], env={**os.environ, "PYTHONPATH": str(tmp_path)}, stdout=log)
    assert log.exists()
    wait_until(lambda: "up" in log.read_text(), timeout=30, message="the child to start")
    assert proc.poll() is None
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL
    assert proc.returncode == -signal.SIGKILL
