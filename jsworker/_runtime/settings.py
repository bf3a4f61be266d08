"""The settings of one worker process: the options of ``jsworker run``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from .._config import option
from .recycling import Recycling

#: The most jobs a pull loop of a worker without ``--max-messages`` holds ahead of its slots.
PREFETCH_GROWS_TO = 1024


@dataclass(frozen=True)
class WorkerSettings:
    """Knobs of one worker process; those with a flag are ``jsworker run``'s options."""

    queues: Sequence[str] | None = option(
        None, flag="--queues -Q", help="Comma-separated queues to work on (default: every queue with a task)."
    )
    concurrency: int = option(
        100,
        flag="--concurrency -c",
        minimum=1,
        help="Jobs run at once (async slots; sync jobs also need a thread).",
    )
    threads: int = option(
        min(32, (os.cpu_count() or 1) + 4), flag="--threads", minimum=1, help="Threads for sync tasks."
    )
    task_processes: int | None = option(
        None,
        flag="--task-processes",
        minimum=1,
        help='Processes for sync tasks declared with executor="process" [default: one per CPU].',
    )
    task_process_max_jobs: int | None = option(
        None,
        flag="--max-jobs-per-task-process",
        minimum=1,
        help='Replace a task process (executor="process") after it ran this many jobs.',
    )
    task_process_max_memory: int | None = option(
        None,
        flag="--max-memory-per-task-process",
        minimum=1,
        help="Replace a task process once it holds this many MiB after a job.",
    )
    max_messages: int | None = option(
        None,
        flag="--max-messages",
        minimum=1,
        help="Prefetch: jobs pulled ahead of free slots, per queue [default: min(concurrency, 128), "
        f"growing up to {PREFETCH_GROWS_TO} to hold about 20 ms of jobs while they go fast].",
    )
    grace: float = option(
        30.0,
        flag="--grace",
        minimum=0,
        help="Seconds running jobs get to finish after SIGTERM before they are cancelled and requeued.",
    )
    expires: float = option(30.0, help="Seconds a pull request stays open on the server.")
    idle_heartbeat: float = option(
        2.5,
        # 2 x this is how long a silently dropped pull (server restart, leader lost) goes unnoticed.
        help="Seconds between the server's heartbeats on an idle pull request.",
    )
    blocked_loop_warning: float = option(1.0, help="Seconds of event-loop lag reported as blocked.")
    stats_interval: float = option(5.0, help="Seconds between reads of the server's queue figures.")
    orphan_check: float = option(
        30.0, help="Seconds between two looks for jobs their queue's consumer no longer hands out."
    )
    schedules: bool = option(
        True,
        flag="--schedules/--no-schedules",
        help="Install the app's periodic schedules at start (create missing ones, replace "
        "changed ones) and put back any that vanish while it runs; --no-schedules leaves the "
        "server's as they are.",
    )

    def __post_init__(self) -> None:
        # --queues arrives as one comma-separated string.
        if isinstance(self.queues, str):
            object.__setattr__(
                self, "queues", [q.strip() for q in self.queues.split(",") if q.strip()] or None
            )

    @property
    def prefetch(self) -> int:
        """Messages a pull loop may hold beyond the running jobs (the least, when it grows)."""
        return self.max_messages if self.max_messages is not None else min(self.concurrency, 128)

    @property
    def prefetch_grows_to(self) -> int | None:
        """The most a pull loop may hold while jobs go fast; None for a fixed ``--max-messages``."""
        return None if self.max_messages is not None else PREFETCH_GROWS_TO

    @property
    def recycling(self) -> Recycling:
        """When a task process is replaced (``--max-jobs-per-task-process``,
        ``--max-memory-per-task-process``)."""
        return Recycling(self.task_process_max_jobs, self.task_process_max_memory)
