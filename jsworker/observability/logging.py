"""structlog set-up for the command line, and the logger the library uses.

The library only calls ``get_logger``; configuration is the application's business, done by
``jsworker run`` through :func:`configure_logging` (or by the user's own structlog set-up).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

LEVELS = ("debug", "info", "warning", "error")


def get_logger(name: str) -> Any:
    """The structlog logger jsworker's modules log through."""
    return structlog.get_logger(name)


def configure_logging(level: str = "info", fmt: str = "console") -> None:
    """Send structlog events to stderr as ``console`` (human) or ``json`` lines.

    Context bound with ``structlog.contextvars`` (the worker binds the job id, task and queue
    around each job) appears on every event, including those a task logs itself.
    """
    numeric = getattr(logging, level.upper())
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
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
