"""When a process that runs jobs is replaced: after so many jobs, or once it holds so much
memory (Celery's ``worker_max_tasks_per_child`` and ``worker_max_memory_per_child``), so that
a leak in task code or in a library it calls costs a restart, not the machine."""

from __future__ import annotations

import os
import resource
import sys
from dataclasses import dataclass


def resident_mib(pid: int | None = None) -> float | None:
    """The resident memory of process ``pid`` (None: this one) in MiB; None when unknown.
    For this process without /proc, its peak."""
    try:
        with open(f"/proc/{pid or 'self'}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        if pid is not None:
            return None
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 1024


@dataclass(frozen=True, slots=True)
class Recycling:
    """Limits after which a process is replaced (None: no limit)."""

    max_jobs: int | None = None
    max_memory_mib: int | None = None

    def due(self, jobs: int, pid: int | None = None) -> str | None:
        """Why a process that ran ``jobs`` jobs is to be replaced now (``"jobs"``,
        ``"memory"``), or None."""
        if self.max_jobs is not None and jobs >= self.max_jobs:
            return "jobs"
        if self.max_memory_mib is not None:
            held = resident_mib(pid)
            if held is not None and held > self.max_memory_mib:
                return "memory"
        return None
