"""The questions a worker answers for users that may not read the job stream or cancel on
their own: a job's status (any producer), its cancel (a canceller), pausing or resuming a
periodic schedule (a dashboard), and a queue's limits (an operator or a dashboard); and
those put to one worker by its id: to go quiet or stop (an operator or a dashboard).

Each question about a job or a schedule goes to one worker of the app (a queue group); the
worker answers with what the server holds, read and changed with the worker's own
permissions. A question to one worker goes to that worker's own subscription. Who may ask
what is the server's to decide, by the permissions on ``jsw.<app>.ask.<question>.*``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Protocol, cast, get_args

from .._core.provisioning import set_queue_limits
from .._enqueue.calls import check_job_id
from .._errors import ConfigurationError, JsworkerError, ScheduleNotFound
from .._lifecycle.cancel import cancel_job
from .._lifecycle.lookup import job_status
from .._lifecycle.state import Form
from .._observability.logging import get_logger
from .._scheduling.declare import schedule_of
from .._scheduling.periodic import put_schedule, set_paused
from .._wire.names import validate_name
from ..jetstream.service import Handler, Serving, serve

if TYPE_CHECKING:
    from .._app import App
    from ..jetstream.connection import Connection

log = get_logger("jsworker.worker")

_GROUP = "jsw-answers"


class Controlled(Protocol):
    """What a worker does when asked (see :func:`answer_control`)."""

    def quiet(self) -> bool:
        """Take no new job and stay up; False when it was quiet already."""
        ...

    def stop(self, *, now: bool = False) -> None:
        """Begin a graceful stop."""
        ...


async def serve_app(
    app: App, conn: Connection, subject: str, handler: Handler, question: str, group: str = ""
) -> Serving:
    """Answer ``question`` on ``subject`` for ``app``'s own processes only: a question whose
    reply subject lies outside the app's inbox space is dropped unhandled, counted in
    ``jsworker_questions_refused_total`` and logged (its reply subject would make the answer
    a write into someone else's subject)."""

    # Made here, so the series is there at 0 from the start (increase() sees the first one).
    count = app.metrics.questions_refused.labels(question)

    def refused(subject: str, reply: str) -> None:
        count.inc()
        log.warning("question.refused", question=question, subject=subject, reply=reply[:200])

    return await serve(conn, subject, handler, replies_under=app.inbox_space, refused=refused, group=group)


async def answer_questions(app: App, conn: Connection) -> Serving:
    """Start answering the status and cancel questions about ``app``'s jobs on ``conn``; close
    the returned service before the connection."""

    async def answer(subject: str, body: bytes) -> bytes:
        question, job_id = subject.rsplit(".", 2)[-2:]
        value: Any
        try:
            check_job_id(job_id)
            if question == "status":
                form = body.decode(errors="replace") or None
                if form not in (None, *get_args(Form)):
                    return json.dumps({"error": f"unknown status form {form!r:.40}"}).encode()
                value = (await job_status(app, conn, job_id, cast(Form | None, form))).as_dict()
            elif question == "cancel":
                value = await cancel_job(app, conn, job_id)
                log.info("job.cancel_asked", job_id=job_id, cancelled=value)
            elif question == "schedule":
                # A dashboard's schedule made at run time, installed with the worker's grants.
                spec = json.loads(body)
                if not isinstance(spec, dict):
                    raise ConfigurationError("a schedule is a JSON object of its fields")
                value = await put_schedule(app, conn, schedule_of(app, job_id, spec))
                log.info("schedule.put_asked", schedule=job_id, done=value)
            elif question == "limits":
                # An operator's or a dashboard's: neither may change a queue's consumer.
                asked = json.loads(body)
                if not isinstance(asked, dict):
                    raise ConfigurationError("limits are a JSON object: max_running, rate_limit")
                value = await set_queue_limits(app, conn, job_id, asked)
                log.info("queue.limits_asked", queue=job_id, limits=value)
            elif question in ("pause", "resume"):
                # A dashboard's: it may not write the schedules stream (which honours rollups).
                value = await set_paused(app, conn, validate_name("schedule", job_id), question == "pause")
                log.info("schedule.pause_asked", schedule=job_id, paused=question == "pause", changed=value)
            else:
                return json.dumps({"error": f"unknown question {question!r}"}).encode()
        except ScheduleNotFound as exc:
            return json.dumps({"error": str(exc), "missing": True}).encode()
        except (JsworkerError, TypeError, ValueError) as exc:  # a bad schedule's arguments too
            return json.dumps({"error": str(exc)}).encode()
        return json.dumps({"value": value}).encode()

    return await serve_app(app, conn, app.namespace.ask_subject("*"), answer, "ask", group=_GROUP)


async def answer_control(app: App, conn: Connection, worker_id: str, worker: Controlled) -> Serving:
    """Start answering the questions put to this worker by its id (``quiet``, ``stop``): an
    operator's or a dashboard's, as the server's permissions on them say; close the returned
    service before the connection. The answer says whether it changed anything."""

    async def answer(subject: str, body: bytes) -> bytes:
        question = subject.rsplit(".", 1)[-1]
        if question == "quiet":
            value = worker.quiet()
        elif question == "stop":
            value = True
            worker.stop()
        else:
            return json.dumps({"error": f"unknown question {question!r}"}).encode()
        log.info("worker.asked", question=question, changed=value)
        return json.dumps({"value": value}).encode()

    return await serve_app(app, conn, app.namespace.worker_ask_subject(worker_id), answer, "worker")
