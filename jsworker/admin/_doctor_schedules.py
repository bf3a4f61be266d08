"""``jsworker doctor``'s look at periodic schedules: those the code declares against those the
server holds. Workers install what is missing when they start, and ``jsworker schedules sync``
does it at deploy time; this says what either would change, and what neither will."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._scheduling.declare import DELAYED_SINCE
from .._scheduling.periodic import read_schedules
from ._findings import Finding

if TYPE_CHECKING:
    from .._app import App
    from ..jetstream.connection import Connection


async def schedules(app: App, conn: Connection) -> list[Finding]:
    """The findings of the schedules check (see the module's docstring)."""
    if conn.server_version < DELAYED_SINCE:
        return []  # no schedules on the server: the server check says which version has them
    installed = await read_schedules(app, conn)
    declared = app.schedules
    found: list[Finding] = []
    missing = sorted(set(declared) - set(installed))
    if missing:
        found.append(
            Finding(
                "warning",
                "schedules",
                f"declared, not installed: {', '.join(missing)}; a worker installs them when it "
                "starts, or run `jsworker schedules sync MODULE`",
            )
        )
    changed = sorted(n for n in set(declared) & set(installed) if installed[n].digest != declared[n].digest)
    if changed:
        found.append(
            Finding(
                "warning",
                "schedules",
                f"installed as an earlier version of the code declared them: {', '.join(changed)}; "
                "run `jsworker schedules sync MODULE`",
            )
        )
    stale = sorted(set(installed) - set(declared))
    if stale:
        found.append(
            Finding(
                "warning",
                "schedules",
                f"installed, declared by no code here: {', '.join(stale)}; they keep firing until "
                "`jsworker schedules sync MODULE --prune` removes them",
            )
        )
    malformed = sorted(n for n, s in installed.items() if s.malformed)
    if malformed:
        found.append(
            Finding(
                "problem",
                "schedules",
                f"not written by jsworker, unreadable: {', '.join(malformed)}; remove them "
                "(`jsworker schedules remove MODULE NAME`)",
            )
        )
    if not found:
        paused = sum(1 for s in installed.values() if s.paused)
        said = f", {paused} paused" if paused else ""
        found.append(Finding("ok", "schedules", f"{len(declared)} declared, all installed as declared{said}"))
    return found
