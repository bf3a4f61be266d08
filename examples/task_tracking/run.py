"""Task tracking: an embedded nats-server, a worker, a few jobs that succeed, retry, fail and
are cancelled (one while it runs, one before any worker received it), then the table the
middleware and the final-state handler kept.

    python examples/task_tracking/run.py

Exits 0 when every job's row reached its final state.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("TRACKING_DB", str(Path(tempfile.mkdtemp()) / "tracking.sqlite3"))

import tracking  # noqa: E402

from jsworker.testing import NatsServer  # noqa: E402


def wait_for(states: dict[str, str], timeout: float = 60.0) -> bool:
    """Wait until each job id's row is in the state given; False on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = {job_id: state for job_id, _, state, _, _ in tracking.show()}
        if all(now.get(job_id) == state for job_id, state in states.items()):
            return True
        time.sleep(0.1)
    return False


def main() -> int:
    with NatsServer() as server:
        tracking.app.servers = [server.url]
        env = {**os.environ, "JSWORKER_URL": server.url, "PYTHONPATH": str(HERE)}
        worker = subprocess.Popen(
            [sys.executable, "-m", "jsworker", "run", "tracking", "--log-level", "warning"], env=env
        )
        try:
            jobs = [tracking.charge.delay(1), tracking.charge.delay(2), tracking.ship.delay(3)]
            long = tracking.report.delay("2026-11-26")
            later = tracking.charge.apply(args=(4,), countdown=3600)  # no worker ever receives it
            ok = wait_for({long.id: "started"})
            ok = ok and long.cancel() and later.cancel()
            want = {
                jobs[0].id: "succeeded",
                jobs[1].id: "succeeded",
                jobs[2].id: "failed",
                long.id: "cancelled",
                later.id: "cancelled",
            }
            ok = ok and wait_for(want)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(30)
            tracking.app.close()
    print(f"{'job id':<24} {'task':<8} {'state':<10} attempts  error")
    for job_id, task, state, attempts, error in tracking.show():
        print(f"{job_id:<24} {task:<8} {state:<10} {attempts:<9} {error or ''}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
