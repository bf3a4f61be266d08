"""Child processes of the benchmark: started here, stopped by their own pid, never by name."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent.parent
STOP_GRACE = 15.0


class Child:
    """A process started by the benchmark, with its output in a log file."""

    def __init__(
        self, name: str, argv: Sequence[str], env: Mapping[str, str], log_dir: Path, *, group: bool = False
    ) -> None:
        self.name = name
        # group: the child forks workers of its own (a supervisor); it then leads a new process
        # group so that whatever it leaves behind can still be found through its own pid.
        self.group = group
        self.log_path = log_dir / f"{name}-{time.monotonic_ns()}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                list(argv),
                env=dict(env),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=group,
            )

    @property
    def pid(self) -> int:
        """The child's pid."""
        return self.proc.pid

    def alive(self) -> bool:
        """True while the process has not exited."""
        return self.proc.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the child's output, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = STOP_GRACE) -> int | None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; the exit code.

        A group child's leftover processes (its group is led by our child's pid) get SIGKILL.
        """
        code: int | None = None
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if code is None:
            code = self.proc.wait(10)
        if self.group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        return code

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def bench_env(url: str, record_file: str | Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment of a child: the server, the record file, and bench/ importable."""
    path = os.pathsep.join(p for p in (str(BENCH_DIR), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, JSWORKER_URL=url, BENCH_RECORD_FILE=str(record_file), PYTHONPATH=path)
    env.update(extra or {})
    return env


def start_worker(
    url: str,
    record_file: str | Path,
    log_dir: Path,
    *,
    queues: str,
    concurrency: int = 100,
    module: str = "apps.bench_app",
    name: str = "worker",
    loop: str = "asyncio",
    extra: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> Child:
    """One ``jsworker run`` process for ``queues`` of the bench app; ``env`` is added to its
    environment (:func:`bench_env`).

    The event loop is asyncio's unless ``loop`` says otherwise: the raw baselines run on
    asyncio, so only a figure that is about uvloop should use it.
    """
    argv = [
        sys.executable,
        "-m",
        "jsworker",
        "run",
        module,
        "-c",
        str(concurrency),
        "--queues",
        queues,
        "--log-level",
        "warning",
        "--loop",
        loop,
        *extra,
    ]
    return Child(name, argv, bench_env(url, record_file, env), log_dir)


def start_raw_consumer(
    url: str, record_file: str | Path, log_dir: Path, *, count: int, mode: str, queue: str, cpu: bool = False
) -> Child:
    """The raw nats-py consumer (``apps/raw_consumer.py``) for ``count`` messages (``cpu``:
    its records carry its CPU time)."""
    argv = [
        sys.executable,
        str(BENCH_DIR / "apps" / "raw_consumer.py"),
        "--count",
        str(count),
        "--mode",
        mode,
        "--queue",
        queue,
        *(["--cpu"] if cpu else []),
    ]
    return Child(f"raw-{mode}", argv, bench_env(url, record_file), log_dir)


def rss_mb(pid: int) -> float:
    """Resident set size of ``pid`` in MB (VmRSS from /proc)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def wait_exit(child: Child, timeout: float) -> int | None:
    """Wait up to ``timeout`` seconds for ``child`` to exit on its own; its code or None."""
    try:
        return child.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None
