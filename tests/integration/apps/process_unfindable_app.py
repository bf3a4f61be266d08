"""A process task bound under another name than its function's: a worker refuses to start,
because a task process looks the task up by the function's name."""

from __future__ import annotations

from jsworker import App

app = App("procbad")


def crunch(n: int) -> int:
    """Module-level, but the name ``crunch`` keeps the function, not the task."""
    return n * n


crunch_task = app.task(executor="process", name="crunch")(crunch)
