"""``jsworker permissions``: the NATS permissions of each role of an app
(:data:`~jsworker._wire.names.ROLES`)."""

from __future__ import annotations

import json
from typing import cast

import click

from .._core.permissions import permissions as role_permissions
from .._core.permissions import server_config
from .._wire.names import MAX_PARTITIONS, ROLES, Role, validate_app_name
from .errors import command_errors


@click.command()
@click.argument("app_names", metavar="APP_NAME...", nargs=-1, required=True)
@click.option(
    "--role",
    "roles",
    type=click.Choice(ROLES),
    multiple=True,
    help="Only this role (repeatable) [default: all of them].",
)
@click.option(
    "--inbox-prefix",
    # Not named like the connection option: this command does not connect.
    "prefix",
    envvar="JSWORKER_INBOX_PREFIX",
    default=None,
    help="The app's inbox prefix, if it sets one [default: _jsw_inbox.<app>].",
)
@click.option(
    "--partitions",
    type=click.IntRange(1, MAX_PARTITIONS),
    default=1,
    show_default=True,
    help="The most partitions any queue of the apps has (App(partitions=N)): every job stream is granted.",
)
@click.option("--json", "as_json", is_flag=True, help="JSON: {app: {role: {publish: ..., subscribe: ...}}}.")
def permissions(
    app_names: tuple[str, ...], roles: tuple[str, ...], prefix: str | None, partitions: int, as_json: bool
) -> None:
    """Print the NATS permissions each role of the named apps needs.

    By default an ``authorization`` block for a nats-server configuration, one user per role
    (``<app>-producer``, ``<app>-canceller``, ``<app>-worker``, ``<app>-operator``,
    ``<app>-dashboard``) whose password the server reads from ``<APP>_<ROLE>_PASSWORD``; with
    --json, the permissions alone, to put in an account's user JWTs or another configuration.
    """
    with command_errors():
        for name in app_names:
            validate_app_name(name)
        chosen = cast(tuple[Role, ...], roles or ROLES)
        if as_json:
            found = {
                name: {role: role_permissions(name, role, prefix, partitions).as_config() for role in chosen}
                for name in app_names
            }
            click.echo(json.dumps(found, indent=2))
        else:
            click.echo(server_config(app_names, chosen, prefix, partitions), nl=False)
