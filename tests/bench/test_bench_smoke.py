"""The benchmark suite runs end to end in quick mode and reports every figure.

Speed is never asserted: only that each expected figure comes out, once, with a usable value.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = "enqueue,processing,latency,mixed,memory"

EXPECTED = [
    "enqueue.raw_publish",
    "enqueue.raw_publish_async",
    "enqueue.raw_publish_async_sliding",
    "enqueue.raw_publish_async_per_job",
    "enqueue.adelay",
    "enqueue.delay_sync",
    "enqueue.adelay_many",
    "processing.raw_continuous",
    "processing.raw_fetch",
    "processing.async",
    "processing.async_uvloop",
    "processing.async_2workers",
    "processing.sync",
    *(
        f"latency.{who}_{rate}.{p}"
        for who in ("raw", "jsworker")
        for rate in (200, 2000)
        for p in ("p50", "p95", "p99")
    ),
    "mixed.seconds",
    "mixed.efficiency",
    "memory.rss_small_mb",
    "memory.rss_large_mb",
    "memory.growth_mb",
]
# Growth can be zero (or slightly negative) on a healthy worker; it only has to be a number.
MAY_BE_ZERO = {"memory.growth_mb"}
# Figures measured against a baseline of the same run must carry that comparison.
COMPARED = {"enqueue.adelay", "enqueue.adelay_many", "processing.async", "latency.jsworker_200.p50"}


def parse_figures(stdout: str) -> dict[str, dict[str, Any]]:
    """The JSON figure lines of the suite's output, by figure name."""
    figures: dict[str, dict[str, Any]] = {}
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        item = json.loads(line)
        assert item["figure"] not in figures, f"figure {item['figure']} reported twice"
        figures[item["figure"]] = item
    return figures


# The schedules family, run on its own with a small --pending.
SCHEDULE_FIGURES = [
    *(f"schedules.{group}.late_{p}" for group in ("accuracy", "burst") for p in ("p50", "p99", "max")),
    "schedules.accuracy.started",
    "schedules.accuracy.early",
    "schedules.accuracy.duplicates",
    "schedules.processing.plain",
    "schedules.processing.fired",
    "schedules.enqueue.adelay_us",
    "schedules.enqueue.countdown_us",
    *(
        f"schedules.pending.{name}"
        for name in (
            "plain_enqueue_rate",
            "enqueue_rate",
            "rss_before_mb",
            "rss_after_mb",
            "rss_restarted_mb",
            "stream_mb",
            "store_mb",
            "cancel_p50",
            "restart_info_ms",
            "restart_accept_ms",
        )
    ),
    "schedules.empty.cancel_p50",
    "schedules.empty.restart_info_ms",
    "schedules.empty.restart_accept_ms",
    *(
        f"schedules.at_1m.{name}"
        for name in ("enqueue_s", "rss_mb", "stream_mb", "store_mb", "cancel_p50", "restart_info_ms")
    ),
    "schedules.at_1m.restart_accept_ms",
]
SCHEDULE_ZERO = {"schedules.accuracy.early", "schedules.accuracy.duplicates"}
SCHEDULE_COMPARED = {
    "schedules.accuracy.late_p50",
    "schedules.processing.fired",
    "schedules.enqueue.countdown_us",
    "schedules.pending.enqueue_rate",
    "schedules.pending.cancel_p50",
    "schedules.pending.restart_info_ms",
}


def check_figures(
    figures: dict[str, dict[str, Any]],
    expected: list[str] = EXPECTED,
    may_be_zero: set[str] = MAY_BE_ZERO,
    compared: set[str] = COMPARED,
) -> None:
    """Every expected figure is there with a finite (and, mostly, positive) value."""
    missing = [name for name in expected if name not in figures]
    assert not missing, f"figures missing from the output: {missing}"
    for name in expected:
        value = figures[name]["value"]
        assert isinstance(value, int | float) and math.isfinite(value), (name, value)
        if name not in may_be_zero:
            assert value > 0, (name, value)
    for name in compared:
        assert figures[name].get("compare"), f"{name} has no comparison with its baseline"


def test_check_figures_fails_on_a_missing_figure() -> None:
    line = json.dumps({"figure": "enqueue.adelay", "value": 1.0, "compare": [{}]})
    with pytest.raises(AssertionError, match="missing"):
        check_figures(parse_figures(line))


def _run_quick(tmp_path: Path, *args: str) -> dict[str, dict[str, Any]]:
    """The figures of ``bench/run.py --quick --runs 1 <args>``; the JSON file it writes must
    hold the same ones as its output."""
    out_file = tmp_path / "figures.jsonl"
    cmd = [sys.executable, "bench/run.py", "--quick", "--runs", "1", *args, "--json-out", str(out_file)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    figures = parse_figures(done.stdout)
    assert parse_figures(out_file.read_text()) == figures
    return figures


@pytest.mark.slow
def test_quick_suite_reports_every_figure(tmp_path: Path) -> None:
    check_figures(_run_quick(tmp_path, "--only", FAMILIES))


@pytest.mark.slow
def test_quick_schedules_report_every_figure(tmp_path: Path) -> None:
    figures = _run_quick(tmp_path, "--only", "schedules", "--pending", "500")
    check_figures(figures, SCHEDULE_FIGURES, SCHEDULE_ZERO, SCHEDULE_COMPARED)
    # Not speed but what the server and the claims promise: every delayed job ran once, none early.
    assert figures["schedules.accuracy.started"]["value"] == 1000
    assert figures["schedules.accuracy.early"]["value"] == 0
    assert figures["schedules.accuracy.duplicates"]["value"] == 0
    assert figures["schedules.pending.enqueue_rate"]["info"]["pending"] == 500


@pytest.mark.slow
def test_quick_lifecycle_reports_every_figure(tmp_path: Path) -> None:
    figures = _run_quick(tmp_path, "--only", "lifecycle", "--pending", "500")
    expected = [
        *(f"lifecycle.{who}_200.{p}" for who in ("reqrep", "result") for p in ("p50", "p99")),
        *(f"lifecycle.processing.{name}" for name in ("raw_continuous", "results_off", "results_on")),
        *(
            f"lifecycle.enqueue.{name}"
            for name in ("raw_publish", "adelay", "expires", "raw_publish_unique", "unique")
        ),
        *(
            f"lifecycle.pending.{layout}.{name}"
            for layout in ("one_subject", "per_id")
            for name in ("rss_growth_mb", "rss_restarted_mb", "stream_mb", "store_mb", "restart_ms")
        ),
    ]
    compared = {"lifecycle.result_200.p50", "lifecycle.processing.results_on", "lifecycle.enqueue.unique"}
    check_figures(figures, expected, set(), compared)
