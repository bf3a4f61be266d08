"""``jsworker doctor``'s look at the credential in use: none on a server that asks for none
(anyone who reaches it may do anything), one broader than every role ``jsworker permissions``
prints (an administrator's, in a process that needs a role's), or one named as a role of the
app that lacks what that role is granted.

The server says nothing of a user's permissions, so they are tried: requests that change
nothing whatever the answer. Reading a stream's info is what the roles that may are granted;
deleting a stream no app has (its name starts with none of jsworker's prefixes, and it is read
first, so an existing one is never touched) is what no role may.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from .._core.permissions import permissions
from .._wire.names import ROLES, Role
from ..jetstream.api import api_subject, may_request, stream_absent
from ._findings import Finding

if TYPE_CHECKING:
    from .._app import App
    from ..jetstream.connection import Connection

#: A stream no app has: jsworker's are ``JSW_<APP>...`` and ``KV_jsw_<app>...``.
PROBE_STREAM = "JSWORKER-DOCTOR-PROBE"


def role_of(app: str, user: str | None) -> Role | None:
    """The role a user named as ``jsworker permissions`` names them (``<app>-<role>``) holds."""
    if user is None or not user.startswith(f"{app}-"):
        return None
    role = user[len(app) + 1 :]
    return next((r for r in ROLES if r == role), None)


async def credentials(app: App, conn: Connection) -> list[Finding]:
    """The findings of the credential check (see the module's docstring)."""
    options = app.connection
    if not options.authenticated:
        if conn.auth_required:
            return [Finding("ok", "credentials", "the server admits this connection without credentials")]
        return [
            Finding(
                "warning",
                "credentials",
                "the server asks for no credentials: whoever reaches it may read, change or delete every "
                "app's streams (`jsworker permissions` prints a user per role; see Security)",
            )
        ]
    who = f"user {options.user}" if options.user else "this credential"
    found: list[Finding] = []
    if await stream_absent(conn, PROBE_STREAM) and await may_request(
        conn, api_subject("STREAM.DELETE", PROBE_STREAM)
    ):
        found.append(
            Finding(
                "problem",
                "credentials",
                f"{who} may delete streams of any name: broader than every role jsworker grants. Give "
                "each process its role's user (`jsworker permissions`)",
            )
        )
    role = role_of(app.name, options.user)
    if role is None:
        found.append(
            Finding(
                "warning" if options.user else "ok",
                "credentials",
                f"{who} is not named as a role of app {app.name} (<app>-<role>): its permissions are "
                "not compared with a role's",
            )
        )
        return found
    granted = permissions(app.name, role, options.inbox_prefix, app.partition_count).publish
    reads = [s for s in granted if s.startswith(api_subject("STREAM.INFO", ""))]
    answers = await asyncio.gather(*(may_request(conn, s) for s in reads))
    lacking = [s for s, may in zip(reads, answers, strict=True) if may is False]
    if lacking:
        found.append(
            Finding(
                "problem",
                "credentials",
                f"{who} (role {role}) is refused what its role is granted: {', '.join(lacking)}. "
                f"Give it the permissions `jsworker permissions {app.name} --role {role}` prints",
            )
        )
    if not found:
        found.append(Finding("ok", "credentials", f"{who}: role {role}, nothing beyond it seen"))
    return found
