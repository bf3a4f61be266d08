"""structlog set-up for the command line, and the logger the library uses.

The library only calls ``get_logger``; configuration is the application's business, done by
``jsworker run`` through :func:`configure_logging` (or by the user's own structlog set-up).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

from ..job import running_job

LEVELS = ("debug", "info", "warning", "error")


def get_logger(name: str) -> Any:
    """The structlog logger jsworker's modules log through."""
    return structlog.get_logger(name)


def add_job_context(logger: Any, method_name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """structlog processor: adds ``job_id``, ``task``, ``queue`` and ``attempt`` of the job the
    event is logged from (inside a task run by a worker, async or sync) unless already set.

    :func:`configure_logging` installs it; an app with its own structlog set-up adds it to its
    processors to get the same fields. The job is looked up only when something is logged, so
    a job that logs nothing pays nothing for it.
    """
    source = running_job.get()
    if source is not None:
        job = source()
        event_dict.setdefault("job_id", job.id)
        event_dict.setdefault("task", job.task)
        event_dict.setdefault("queue", job.queue)
        event_dict.setdefault("attempt", job.attempt)
    return event_dict


def configure_logging(level: str = "info", fmt: str = "console") -> None:
    """Send structlog events to stderr as ``console`` (human) or ``json`` lines.

    Events logged inside a task carry the job's id, task, queue and attempt
    (:func:`add_job_context`); context bound with ``structlog.contextvars`` appears too.
    """
    numeric = getattr(logging, level.upper())
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        add_job_context,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if fmt == "json":
        processors += [structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer()]
    else:
        processors += [structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(
        level=max(numeric, logging.WARNING), stream=sys.stderr, format="%(name)s: %(message)s"
    )
