"""The examples run end to end: the README's first command (the quickstart) and the others."""

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


def test_the_typed_example_gets_its_typed_result_and_a_wrong_type_is_refused() -> None:
    result = run_example("typed_tasks")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "amount due: Decimal('200.75')",
        "refused at enqueue: task amount_due: argument 'as_of' (date): Expected `date`, got `int`",
    ]
    assert "Traceback" not in result.stderr


def test_the_workflow_example_runs_a_chain_a_stopped_chain_and_a_chord() -> None:
    result = run_example("workflows")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "chain: charged 12.50 for order 1"
    assert lines[1].startswith("chain stopped: workflow ") and lines[1].endswith(
        "failed at step 0: no sold-out left"
    )
    assert lines[2:] == [
        "  its state: failed at step 0; step 1 enqueued: False",
        "chord: thumbnails.zip (3 files: photo-0-320w.png, photo-1-320w.png, photo-2-320w.png)",
    ]
    assert "Traceback" not in result.stderr
