"""The README's first command must keep working: the quickstart runs end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_quickstart_runs_every_job() -> None:
    """examples/quickstart/run.py starts its server and worker, and all its jobs get done."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart" / "run.py")],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all 6 jobs done" in result.stdout
    # flaky_report fails its first attempt: one more start, one failure, one retry.
    assert "job events: 6 enqueued, 7 started, 6 succeeded, 1 failed, 1 retried" in result.stdout
    assert "worker stopped (exit code 0)" in result.stdout
    assert "Traceback" not in result.stderr
