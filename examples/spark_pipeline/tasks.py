"""The example's app: one task that mostly succeeds, fails once for ``flaky`` rows (then
succeeds on its retry) and rejects ``bad`` rows (dead letters). Job events are on.

Servers come from ``JSWORKER_URL``, which ``run.py`` sets for itself and for its workers.
"""

from __future__ import annotations

from jsworker import App, Reject, current_job

# Short backoffs: the retries of a demonstration should not keep it waiting.
app = App("pipeline", events=True, retry_backoff=0.05, retry_backoff_max=0.2)


@app.task
async def score_order(order_id: int, cents: int, flaky: bool, bad: bool) -> int:
    """Score one order: the work itself is trivial, the outcomes are what the report shows."""
    if bad:
        raise Reject(f"order {order_id} has no customer")
    if flaky and current_job().attempt == 1:
        raise ConnectionError("scoring service timed out")
    return cents // 100


@app.task(store_result=True)
async def quote(order_id: int, cents: int, flaky: bool, bad: bool) -> dict[str, int]:
    """Price one order: its result comes back to the DataFrame (``map_dataframe``)."""
    if bad:
        raise Reject(f"order {order_id} has no customer")
    if flaky and current_job().attempt == 1:
        raise ConnectionError("pricing service timed out")
    return {"cents": cents, "tax": cents // 5}
