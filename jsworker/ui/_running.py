"""What the dashboard runs beside its requests: an action on every job a listing matches
(see :mod:`._pages.bulk`), with how far it got."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Literal

from ..admin import ListedState

Verb = Literal["cancel", "retry"]


@dataclasses.dataclass
class Bulk:
    """One action on every matching job, running: what, on which, how many done so far."""

    verb: Verb
    state: ListedState
    queue: str | None
    task: str | None
    done: int = 0
    seen: int = 0
    runner: asyncio.Task[None] | None = None

    @property
    def key(self) -> str:
        return "/".join((self.verb, self.state, self.queue or "*", self.task or "*"))

    def said(self) -> str:
        """How the jobs page tells of it."""
        what = "Cancelling" if self.verb == "cancel" else "Running now"
        where = "".join(
            f" of {kind} {name}" for kind, name in (("queue", self.queue), ("task", self.task)) if name
        )
        return f"{what} every {self.state} job{where}: {self.done:,} of {self.seen:,} read so far."
