"""Typed tasks: their parameters' types hold at the call site, at enqueue and in the worker.

``mypy --strict`` checks every ``.delay``/``.adelay`` against the task's own signature (a wrong
argument is a type error before anything runs); at enqueue, each annotated argument is checked
and encoded (a wrong type is a ``TypeError`` naming the parameter, and nothing is sent); the
worker calls the task with the annotated types rebuilt (a ``Decimal``, a ``date``, the
dataclass), not with their JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from jsworker import App

app = App("billing")


@dataclass(frozen=True)
class Invoice:
    number: str
    amount: Decimal
    due: date


@app.task(store_result=True)
async def amount_due(invoices: list[Invoice], as_of: date) -> Decimal:
    """What the invoices due on ``as_of`` or before add up to."""
    return sum((invoice.amount for invoice in invoices if invoice.due <= as_of), Decimal(0))
