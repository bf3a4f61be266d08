"""Measurements, medians over runs, percentiles."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Measurement:
    """One value of one figure from one run."""

    figure: str
    value: float
    unit: str
    label: str
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Summary:
    """A figure over all runs: median with the range."""

    figure: str
    label: str
    unit: str
    values: list[float]
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        """Median over runs."""
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        """Smallest value over runs."""
        return min(self.values)

    @property
    def high(self) -> float:
        """Largest value over runs."""
        return max(self.values)


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile ``p`` (0-100) of ``values``."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize(runs: list[list[Measurement]]) -> dict[str, Summary]:
    """Group the measurements of every run by figure, in first-seen order."""
    out: dict[str, Summary] = {}
    for run in runs:
        for m in run:
            s = out.setdefault(m.figure, Summary(m.figure, m.label, m.unit, [], dict(m.info)))
            s.values.append(m.value)
    return out
