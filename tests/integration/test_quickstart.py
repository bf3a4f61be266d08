"""The README's first command must keep working: the quickstart runs end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def run_example(name: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``examples/<name>/run.py``, run to its end; its output as text."""
    return subprocess.run(
        [sys.executable, str(ROOT / "examples" / name / "run.py")],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def test_quickstart_runs_every_job() -> None:
    """examples/quickstart/run.py starts its server and worker, and all its jobs get done."""
    result = run_example("quickstart")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all 6 jobs done" in result.stdout
    # flaky_report fails its first attempt: one more start, one failure, one retry.
    assert "job events: 6 enqueued, 7 started, 6 succeeded, 1 failed, 1 retried" in result.stdout
    assert "worker stopped (exit code 0)" in result.stdout
    assert "Traceback" not in result.stderr


def test_the_task_tracking_example_keeps_every_jobs_final_state(tmp_path: Path) -> None:
    """examples/task_tracking: a middleware and a final-state handler keep a row per job, from
    enqueued to its end, a job cancelled before any worker received it included."""
    result = run_example("task_tracking", {"TRACKING_DB": str(tmp_path / "tracking.sqlite3")})
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line.split()[1:4] for line in result.stdout.splitlines()[1:]]
    assert sorted(rows) == [
        ["charge", "cancelled", "0"],  # a delayed job: never ran
        ["charge", "succeeded", "1"],
        ["charge", "succeeded", "2"],  # failed once, retried
        ["report", "cancelled", "1"],
        ["ship", "failed", "1"],
    ]
    assert "Traceback" not in result.stderr
