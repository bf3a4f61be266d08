"""The tasks of the workflow example: an order's chain, and a chord of thumbnails."""

from __future__ import annotations

from decimal import Decimal

from jsworker import App, Reject

# workflows=True: producers and workers alike (the workflow's state lives in the job stream).
app = App("orders", workflows=True, results=True)


@app.task
async def reserve(order_id: int, sku: str) -> dict[str, object]:
    """Holds the stock of one order: the first step of its chain."""
    if sku == "sold-out":
        raise Reject(f"no {sku} left")  # ends the job for good: the chain stops here
    return {"order_id": order_id, "sku": sku}


@app.task
async def charge(reserved: dict[str, object], amount: Decimal) -> str:
    """Gets the step before's result first, then its own arguments."""
    return f"charged {amount} for order {reserved['order_id']}"


@app.task
async def notify(failure: dict[str, object]) -> None:
    """The chain's error callback: given the failure's details (step, task, reason...)."""


@app.task
async def thumbnail(path: str, width: int) -> str:
    return f"{path.rsplit('.', 1)[0]}-{width}w.png"


@app.task
async def zip_all(paths: list[str]) -> str:
    """A chord's callback: every member's result, in member order."""
    return f"thumbnails.zip ({len(paths)} files: {', '.join(paths)})"
