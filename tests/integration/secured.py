"""A server whose users hold exactly the permissions ``jsworker permissions`` prints (apps
``perm`` and ``other``, one user per role) plus an unrestricted ``admin`` that tests observe
with; and apps and commands that connect as one of those users."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

from jsworker import App
from jsworker.jetstream.connection import Connection
from jsworker.testing import NatsServer
from jsworker.testing._pytest_plugin import STORE_CONFIG

from .. import launcher
from .workers import worker_env

PASSWORD = "pw-{}"
ADMIN = ("admin", "admin-pw")


def server_with(tmp_path: Path, block: str) -> NatsServer:
    """A started server with the users of ``block`` and ``admin``."""
    admin = f'    {{user: "{ADMIN[0]}", password: "{ADMIN[1]}"}}\n  ]\n}}\n'
    config = tmp_path / "auth.conf"
    # A file store of its own size, as the plugin's fixtures have: the apps' streams reserve
    # their byte limits against it, which would otherwise depend on the free disk.
    config.write_text(block.removesuffix("  ]\n}\n") + admin + STORE_CONFIG)
    return NatsServer(extra_args=["-c", str(config)]).start()


def as_user(user: str) -> dict[str, str]:
    """The environment that makes a jsworker process connect as ``user``."""
    return {"JSWORKER_USER": user, "JSWORKER_PASSWORD": PASSWORD.format(user)}


def role_cli(
    url: str, user: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``jsworker ARGS`` run as ``user`` (``env`` added to its environment)."""
    return launcher.run(args, env={**worker_env(url), **as_user(user), **(env or {})}, timeout=60)


def provision(url: str, module: str = "perm_app") -> str:
    """Run ``jsworker provision module`` (an app ``perm``) as ``perm-provisioner``, what a
    deployment does before it starts the workers; its output."""
    done = role_cli(url, "perm-provisioner", "provision", module)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def provision_as_admin(url: str) -> None:
    """Create app ``perm``'s streams as ``admin`` (what a worker does at start)."""
    app = App("perm", url, user=ADMIN[0], password=ADMIN[1])
    conn = await Connection.open(app.connect_options("operator", "test"))
    try:
        await app.provision_streams(conn)
    finally:
        await conn.close()


def role_app(url: str, user: str, name: str = "perm") -> App:
    """App ``name`` as ``user`` sees it, with the tasks of ``apps/perm_app.py`` (bodies left
    out: only workers run them)."""
    app = App(name, url, user=user, password=PASSWORD.format(user), publish_timeout=15)
    app.queue("gated", max_running=1)

    @app.task(store_result=True)
    async def add(a: int, b: int) -> int:
        return a + b

    @app.task(max_retries=0)
    async def refuse() -> None: ...

    @app.task(max_retries=3)
    async def not_yet() -> None: ...

    @app.task(queue="gated", store_result=True)
    async def hold(gate: str) -> str:
        return gate

    @app.task(queue="gated", unique=True, store_result=True)
    async def hold_once(gate: str) -> str:
        return gate

    return app


@contextlib.asynccontextmanager
async def role_session(url: str, user: str) -> AsyncIterator[App]:
    """App ``perm`` as ``user`` (see :func:`role_app`), closed however the block ends."""
    app = role_app(url, user)
    try:
        yield app
    finally:
        await app.aclose()
