"""``jsworker doctor``: what is wrong, or worth a look, in how an app runs on its servers
(:mod:`jsworker.admin._doctor`).

Exit codes: 0 nothing wrong (warnings may be printed), 4 a problem found, and as for every
command 2 for a usage error and 3 when the servers cannot be reached.
"""

from __future__ import annotations

import asyncio

import click

from .._app import App
from .._observability.logging import configure_logging
from ..admin._doctor import Finding, diagnose, findings_json
from ..admin._doctor_access import role_of
from ..jetstream.connection import Connection
from .connection import connection_options, load_connected_app
from .errors import command_errors

#: The exit code of a doctor that found a problem.
EXIT_PROBLEM = 4

_LABELS = {"ok": "ok", "warning": "warning", "problem": "PROBLEM"}


@click.command()
@click.argument("app_spec", metavar="MODULE[:ATTR]")
@click.option(
    "--monitoring",
    "monitoring",
    multiple=True,
    metavar="URL",
    help="A server's monitoring URL (http://host:8222), repeatable: checks that acknowledged writes "
    "are on disk.",
)
@click.option("--json", "as_json", is_flag=True, help="The findings as one JSON array.")
@connection_options
def doctor(app_spec: str, monitoring: tuple[str, ...], as_json: bool, **connection: str | None) -> None:
    """Check how the App in MODULE runs on its servers: the server and what it supports, the
    streams and queue consumers against the code, where jobs sit while the partitions change,
    the periodic schedules against the code, the credential in use against its role, the
    clock, and the servers' durability. Exits 4 when something is wrong.

    Run it with an operator's credential to check everything; with another role's (a user
    named <app>-<role>) it checks that credential and says what that role may not read."""
    # The findings say what the client would log (a read refused to this role, say), and
    # stdout carries only them: --json must stay JSON.
    configure_logging("critical")
    app = load_connected_app(app_spec, connection)
    with command_errors("doctor failed"):
        found = asyncio.run(_diagnose(app, monitoring))
    if as_json:
        click.echo(findings_json(found))
    else:
        for finding in found:
            click.echo(f"{_LABELS[finding.level]:<8} {finding.check:<11} {finding.message}")
    if any(f.level == "problem" for f in found):
        raise SystemExit(EXIT_PROBLEM)


async def _diagnose(app: App, monitoring: tuple[str, ...]) -> list[Finding]:
    # As the role its user is named for (<app>-<role>), whose inbox that user may use: an
    # operator's by default, which may make every read the checks make.
    role = role_of(app.name, app.connection.user) or "operator"
    conn = await Connection.open(app.connect_options(role, "doctor"))
    try:
        return await diagnose(app, conn, monitoring)
    finally:
        await conn.close()
