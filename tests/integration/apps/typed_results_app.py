"""A process task with a typed result, for tests/integration/test_typed_arguments.py (a task
process finds its function by module and name)."""

from __future__ import annotations

from decimal import Decimal

from jsworker import App

app = App("typedres")


@app.task(executor="process", store_result=True)
def tax(amount: Decimal) -> Decimal:
    return (amount * Decimal("0.2")).quantize(Decimal("0.01"))
