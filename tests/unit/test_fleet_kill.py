"""The supervisor's kill of a worker process that will not exit: the process, the children it
left in its process group, and those that left the group, and nothing else."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from jsworker._fleet.kill import kill_tree

from ..support import wait_until

MARKER = "jsw-kill-tree-test"
# A parent holding two sleeping children: one in its process group, one in a session of its own.
PARENT = f"""
import subprocess, sys, time
sleeper = [sys.executable, "-c", "import time; time.sleep(120)", "{MARKER}"]
a = subprocess.Popen(sleeper)
b = subprocess.Popen(sleeper, start_new_session=True)
print(a.pid, b.pid, flush=True)
time.sleep(120)
"""


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"  # a zombie: dead, waiting for its reaper


@pytest.fixture
def family(request: pytest.FixtureRequest) -> Iterator[tuple[subprocess.Popen[bytes], list[int]]]:
    """The parent (leading a process group of its own when the test is parametrized so) and
    its children's pids; whatever is left of them is killed by pid afterwards."""
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, MARKER],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        process_group=0 if request.param else None,
    )
    children: list[int] = []
    try:
        assert parent.stdout is not None
        children = [int(pid) for pid in parent.stdout.readline().split()]
        yield parent, children
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.wait(10)
        if parent.stdout is not None:
            parent.stdout.close()
        for pid in children:
            if not _gone(pid) and MARKER.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
@pytest.mark.parametrize("family", [True, False], ids=["group-leader", "in-our-group"], indirect=True)
def test_kill_tree_kills_the_process_and_every_child(
    family: tuple[subprocess.Popen[bytes], list[int]],
) -> None:
    parent, children = family
    assert len(children) == 2
    assert sorted(kill_tree(parent.pid)) == sorted(children)
    assert parent.wait(10) == -signal.SIGKILL
    wait_until(
        lambda: [pid for pid in children if not _gone(pid)],
        until=lambda left: not left,
        timeout=5,
        message="both children gone",
    )
    # Not a leader, the parent shared this process's group: that group was left alone (this
    # test runs on).
