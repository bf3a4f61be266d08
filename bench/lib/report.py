"""The table and the JSON lines of a suite run."""

from __future__ import annotations

import json
from typing import Any

from .stats import Summary
from .targets import Verdict


def _num(value: float, unit: str) -> str:
    if unit == "ratio":
        # Three decimals: a target like >= 0.9 must not look met by rounding.
        return f"{value:.3f}"
    if unit in ("ms", "us/job"):
        return f"{value:.2f}"
    if unit in ("MB", "s"):
        return f"{value:.1f}"
    return f"{value:,.0f}"


def _vs(v: Verdict) -> str:
    comp = v.comparison
    lo, hi = min(v.values), max(v.values)
    if comp.kind == "ratio":
        return f"{v.median:.2f}x [{lo:.2f}, {hi:.2f}] vs {comp.baseline}"
    if comp.kind == "diff":
        return f"{v.median:+.2f} ms [{lo:+.2f}, {hi:+.2f}] vs {comp.baseline}"
    return ""


def table(summaries: dict[str, Summary], verdicts: dict[str, list[Verdict]], meta: dict[str, Any]) -> str:
    """A markdown table: one row per figure, and one more per extra comparison of it."""
    head = (
        f"{meta['mode']} mode, {meta['runs']} run(s), {meta['cpus']} CPUs, load {meta['loadavg']}, "
        f"Python {meta['python']}, {meta['date']}, {meta.get('seconds', '?')} s"
    )
    rows = [
        head,
        "",
        "| figure | what | median | min-max | unit | vs baseline (same run) | target | |",
        "|---|---|---:|---:|---|---|---|---|",
    ]
    for name, s in summaries.items():
        vs = verdicts.get(name) or [None]
        for i, v in enumerate(vs):
            first = i == 0
            cells = [
                name if first else "",
                s.label if first else "",
                _num(s.median, s.unit) if first else "",
                f"{_num(s.low, s.unit)}-{_num(s.high, s.unit)}" if first else "",
                s.unit if first else "",
                _vs(v) if v else "",
                v.comparison.target_text if v else "",
                {True: "PASS", False: "MISS", None: ""}[v.passed] if v else "",
            ]
            rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def json_lines(
    summaries: dict[str, Summary], verdicts: dict[str, list[Verdict]], meta: dict[str, Any]
) -> list[str]:
    """One JSON object per figure: median, range, runs, and its comparisons."""
    lines = []
    for name, s in summaries.items():
        item: dict[str, Any] = {
            "figure": name,
            "label": s.label,
            "unit": s.unit,
            "value": s.median,
            "min": s.low,
            "max": s.high,
            "runs": s.values,
            "info": s.info,
        }
        comps = []
        for v in verdicts.get(name, []):
            comps.append(
                {
                    "baseline": v.comparison.baseline,
                    "kind": v.comparison.kind,
                    "median": v.median,
                    "min": min(v.values),
                    "max": max(v.values),
                    "target": v.comparison.target_text or None,
                    "pass": v.passed,
                }
            )
        if comps:
            item["compare"] = comps
        item["mode"] = meta["mode"]
        lines.append(json.dumps(item))
    return lines
