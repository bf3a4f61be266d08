"""structlog set-up for the command line, and the logger the library uses.

The library only calls ``get_logger``; configuration is the application's business, done by
``jsworker run`` through :func:`configure_logging` (or by the user's own structlog set-up).
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from typing import Any

import structlog

from .._current import running_job

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


MAX_VALUE = 1000
"""Characters of one logged string value; the rest is cut (values may come from messages)."""


def safe_values(logger: Any, method_name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    """structlog processor: string values with control characters escaped (a task name or a
    header from a hostile message cannot rewrite a terminal or forge a log line) and cut to
    :data:`MAX_VALUE` characters."""
    for key, value in event_dict.items():
        if isinstance(value, str) and (len(value) > MAX_VALUE or not value.isprintable()):
            event_dict[key] = printable(value)
    return event_dict


def printable(text: str, limit: int = MAX_VALUE) -> str:
    """``text`` with every non-printable character escaped, cut to ``limit`` characters."""
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


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
    processors.append(safe_values)
    # Tracebacks without local variables: a task's locals are its arguments (card numbers,
    # addresses), which must never reach a log.
    if fmt == "json":
        tracebacks = structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
        processors += [
            structlog.processors.ExceptionRenderer(tracebacks),
            structlog.processors.JSONRenderer(),
        ]
    else:
        formatter: Any = structlog.dev.plain_traceback
        if importlib.util.find_spec("rich") is not None:
            formatter = structlog.dev.RichTracebackFormatter(show_locals=False)
        processors += [
            structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(), exception_formatter=formatter)
        ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(
        level=max(numeric, logging.WARNING), stream=sys.stderr, format="%(name)s: %(message)s"
    )
