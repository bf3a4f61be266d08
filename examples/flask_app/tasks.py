"""The tasks of the Flask example: the web app enqueues them, ``jsworker run tasks`` runs them."""

from __future__ import annotations

from jsworker import App

app = App("reports")


@app.task(store_result=True)
def build_report(customer: str, month: str) -> dict[str, str]:
    """Pretends to build a monthly report; its result is kept for the web app to fetch."""
    return {"customer": customer, "month": month, "url": f"/files/{customer}-{month}.pdf"}
