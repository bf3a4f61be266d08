"""What each check of ``jsworker doctor`` reports (see :mod:`._doctor`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Level = Literal["ok", "warning", "problem"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing ``jsworker doctor`` found: its ``level``, the ``check`` it came from and what
    it says."""

    level: Level
    check: str
    message: str


def findings_json(found: Sequence[Finding]) -> str:
    """``found`` as one JSON array (``jsworker doctor --json``)."""
    return json.dumps([{"level": f.level, "check": f.check, "message": f.message} for f in found], indent=2)
