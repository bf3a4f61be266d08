"""Periodic schedules the scheduling tests install and operate from the command line."""

from __future__ import annotations

from datetime import timedelta

from jsworker import App

app = App("cadence")


@app.task(cron="0 7 * * *", tz="Europe/Berlin")
def morning_report() -> None:
    """Declared with the schedule of its own name."""


@app.task
def ping(host: str) -> None:
    """Scheduled with arguments below."""


app.schedule(ping, every=timedelta(minutes=5), name="ping-db", args=("db",))
