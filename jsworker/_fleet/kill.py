"""Killing a worker process and every process it started (its task processes, whatever they
started in turn), found from the process table, so that none outlives a fleet that gave up on it."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
from collections.abc import Callable


def kill_tree(pid: int) -> list[int]:
    """SIGKILL the process ``pid`` and every process it started; the pids of those others.

    ``pid`` must be a child of this process not reaped yet, so that neither its pid nor its
    process group can be anybody else's meanwhile. A worker process leads a process group of
    its own, which the processes it starts (a process pool's, a subprocess's) stay in unless
    they leave it: the whole group is killed. Those that left (a new session or group) are
    found in /proc by their parent pids, before the kill (once their parent is gone they are
    another's children), and each is held by a pidfd, taken while it is still a child of the
    tree, so that the signal reaches that process and never a later owner of its pid.
    """
    table = _process_table()
    tree = _descendants(table, pid)
    try:
        leader = os.getpgid(pid) == pid
    except OSError:  # already gone (a zombie still has its group; a reaped one: nothing to do)
        leader = False
    family = {pid, *tree}
    held = [_hold(other, family) for other in tree if not leader or table[other][1] != pid]
    if leader:
        _suppressed(os.killpg, pid, signal.SIGKILL)
    _suppressed(os.kill, pid, signal.SIGKILL)
    for send in held:
        if send is not None:
            send()
    return sorted(tree)


def kill_group_left(pid: int) -> list[int]:
    """SIGKILL what is left of the process group that the ended process ``pid`` led (a child
    of this process, not reaped yet, so that its group id is still its own): the processes it
    started that stayed in its group, a process pool's among them, which outlive it by default
    and go on computing under init. Their pids. A process that left the group (a session of
    its own) is not found once its parent is gone."""
    try:
        if os.getpgid(pid) != pid:
            return []
    except OSError:
        return []
    left = sorted(other for other, (_, group) in _process_table().items() if group == pid and other != pid)
    if left:
        _suppressed(os.killpg, pid, signal.SIGKILL)
    return left


def _hold(pid: int, family: set[int]) -> Callable[[], None] | None:
    """How to SIGKILL ``pid`` later, if it is (still) a child of one of ``family``."""
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError) as exc:
        if isinstance(exc, OSError) and exc.errno != errno.ENOSYS:
            return None  # gone already
        # No pidfds (Linux before 5.3, or another system with a /proc): the pid as just read.
        return lambda: _suppressed(os.kill, pid, signal.SIGKILL)
    stat = _stat(pid)
    if stat is None or stat[0] not in family:
        os.close(fd)
        return None

    def send() -> None:
        try:
            _suppressed(signal.pidfd_send_signal, fd, signal.SIGKILL)
        finally:
            os.close(fd)

    return send


def _suppressed(call: Callable[[int, int], object], target: int, sig: int) -> None:
    with contextlib.suppress(OSError):
        call(target, sig)


def _process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every process /proc shows (none without /proc)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    table = {}
    for name in names:
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None:
                table[int(name)] = stat
    return table


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, process group) of ``pid`` from /proc, or None when it is not there."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except OSError:
        return None
    # The command name, in parentheses, may hold anything: the fields follow its last ")".
    fields = data.rpartition(b")")[2].split()
    try:
        return int(fields[1]), int(fields[2])
    except (IndexError, ValueError):
        return None


def _descendants(table: dict[int, tuple[int, int]], root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found
