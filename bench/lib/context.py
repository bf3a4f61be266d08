"""What every figure gets: the server, a scratch directory, the sizes of this mode."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Sizes:
    """Job counts and rates of one mode (normal or ``--quick``)."""

    enqueue_jobs: int
    process_jobs: int
    latency: tuple[tuple[int, int], ...]  # (rate per second, jobs)
    mixed_jobs: int
    mixed_concurrency: int
    memory_small: int
    memory_large: int


NORMAL = Sizes(
    enqueue_jobs=20_000,
    process_jobs=20_000,
    latency=((200, 2_000), (2_000, 10_000)),
    mixed_jobs=10_000,
    mixed_concurrency=500,
    memory_small=1_000,
    memory_large=100_000,
)
QUICK = Sizes(
    enqueue_jobs=500,
    process_jobs=2_000,
    latency=((200, 200), (2_000, 1_000)),
    mixed_jobs=2_000,
    mixed_concurrency=500,
    memory_small=200,
    memory_large=5_000,
)


@dataclass
class Context:
    """Shared by the figures of one suite run."""

    url: str
    sizes: Sizes
    scratch: Path
    #: The suite's nats-server, for figures that read its CPU time.
    server_pid: int | None = None
    run: int = 0
    _serial: itertools.count = field(default_factory=itertools.count)  # type: ignore[type-arg]

    def record_file(self, name: str) -> str:
        """A fresh, not yet existing record file path for ``name``."""
        return str(self.scratch / f"{name}-{self.run}-{next(self._serial)}.rec")

    @property
    def log_dir(self) -> Path:
        """Where child processes write their output."""
        path = self.scratch / "logs"
        path.mkdir(exist_ok=True)
        return path
