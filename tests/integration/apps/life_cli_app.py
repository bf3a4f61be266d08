"""Tasks whose jobs the command-line tests ask about: one keeps results, one fails."""

from __future__ import annotations

from jsworker import App, Reject

app = App("lifecli")


@app.task(store_result=True)
async def square(n: int) -> int:
    """Keeps its result."""
    return n * n


@app.task(store_result=True)
async def refuse(n: int) -> None:
    """Dead-lettered at once."""
    raise Reject(f"no {n}")
