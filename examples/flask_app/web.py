"""A Flask app that enqueues jobs from plain (sync) views.

    gunicorn web:flask_app --workers 4 --preload   # the web app
    jsworker run tasks                              # a worker, in another terminal

Sync code enqueues with ``.delay``, which runs on a background event loop of the app's own: no
connection per call. A process forked after the app was imported (gunicorn's workers with
``--preload``) opens its own connection on its first enqueue; nothing is shared across a fork.
"""

from __future__ import annotations

from typing import Any

from flask import Flask, abort, request
from tasks import app as jobs
from tasks import build_report

from jsworker import JobNotFound, JobState

flask_app = Flask(__name__)


@flask_app.post("/reports")
def request_report() -> tuple[dict[str, Any], int]:
    body = request.get_json()
    job = build_report.delay(body["customer"], body["month"])
    return {"job_id": job.id}, 202


@flask_app.get("/reports/<job_id>")
def report(job_id: str) -> dict[str, Any]:
    """The report once built (``?wait=`` seconds to wait for it), else where its job is."""
    wait = request.args.get("wait", type=float)
    if wait:
        try:
            return {"state": "succeeded", "report": jobs.job(job_id).result(timeout=wait)}
        except JobNotFound:
            abort(404)
        except TimeoutError:
            pass
    status = jobs.status(job_id)
    if status.state is JobState.UNKNOWN:
        abort(404)
    return {"state": status.state.value}
