"""Where the modules of earlier releases went: ``import jsworker.errors`` and the like fail with
a message that names the public home of their names, instead of a bare "no module".

Only ``jsworker``, ``jsworker.admin``, ``jsworker.events``, ``jsworker.workflows``,
``jsworker.testing``, ``jsworker.spark`` (and ``jsworker.spark.analytics``), ``jsworker.ui``
and ``jsworker.contrib.otel`` are public; every other module is private (its name starts with
an underscore, or it is ``jsworker.jetstream``, the NATS layer) and may change in any release.
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

# Modules of earlier releases, by their name under jsworker, and the public home of what
# users imported from them. A module not listed here whose name was one of these folders'
# is private now; its public names are importable from ``jsworker``.
_HOMES = {
    "status": "import QueueStatus from jsworker.admin",
    "paging": "import Page from jsworker.admin",
    "deadletters": "import DeadLetters from jsworker.admin, its exceptions from jsworker",
    "observability.logging": "import add_job_context from jsworker",
    "server": "import NatsServer and NatsCluster from jsworker.testing",
    "testing.pytest_plugin": "the pytest plugin loads by itself once jsworker is installed",
}
_EARLIER = {
    "errors", "config", "current", "wire", "naming", "app", "app_options", "appview", "hooks",
    "layout", "connections", "bridge", "provisioning", "permissions", "middleware", "status",
    "paging", "task", "task_options", "producer", "calls", "named", "arguments", "serializers",
    "job", "jobstatus", "rates", "flow", "workers", "observability", "scheduling",
    "lifecycle", "deadletters", "runtime", "fleet", "server", "cli",
}  # fmt: skip
# Modules of the public packages that are private now: their public names are the package's.
_PACKAGES = {"admin", "events", "spark", "testing", "ui", "workflows"}


def home(fullname: str) -> str | None:
    """Where the names of ``fullname``, a module of an earlier release, are imported from now
    (advice to the reader), or None for a name jsworker never had."""
    parts = fullname.split(".")
    if parts[0] != "jsworker" or len(parts) < 2:
        return None
    rest = ".".join(parts[1:])
    for old, new in _HOMES.items():
        if rest == old or rest.startswith(old + "."):
            return new
    if parts[1] in _EARLIER:
        return "import its names from jsworker"
    if parts[1] in _PACKAGES and len(parts) > 2 and not parts[2].startswith("_"):
        return f"import its names from jsworker.{parts[1]}"
    return None


class MovedModules(importlib.abc.MetaPathFinder):
    """Consulted after every other finder: a module of an earlier release that no longer
    exists raises ModuleNotFoundError naming the public home of its names."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        """None for any module but those of earlier releases; for those, the error."""
        where = home(fullname)
        if where is None:
            return None
        raise ModuleNotFoundError(
            f"{fullname} is not a public module of jsworker (any more): {where}", name=fullname
        )


def install() -> None:
    """Add :class:`MovedModules` to the import system once, last."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())
