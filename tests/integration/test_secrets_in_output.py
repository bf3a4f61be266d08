"""A password in a server URL never shows in what jsworker prints or logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from jsworker import App, EnqueueError

from .. import launcher
from ..support import REFUSED_QUICKLY, free_port
from .workers import worker_env

SECRET = "S3cretPassw0rd"

COMMANDS = [
    ["run", "acceptance_app"],
    ["run", "acceptance_app", "--log-format", "json"],
    ["status", "acceptance_app"],
    ["status", "acceptance_app", "--json"],
    ["workers", "acceptance_app"],
    ["dlq", "list", "acceptance_app"],
    ["dlq", "show", "acceptance_app", "1"],
    ["dlq", "replay", "acceptance_app", "--all"],
    ["dlq", "purge", "acceptance_app", "--yes"],
    ["events", "export", "acceptance_app", "--since", "1h", "--to", "out"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c[:2]) for c in COMMANDS])
def test_commands_that_cannot_connect_do_not_print_the_password(command: list[str], tmp_path: Path) -> None:
    url = f"nats://admin:{SECRET}@127.0.0.1:{free_port()}"
    result = launcher.run(
        [*command, "--url", url], env={**worker_env(url), **REFUSED_QUICKLY}, timeout=60, cwd=tmp_path
    )
    output = result.stdout + result.stderr
    assert result.returncode == 3, output
    assert "cannot connect" in output
    assert SECRET not in output
    assert "admin" not in output


def test_enqueue_errors_do_not_carry_the_password() -> None:
    app = App("secrets", f"nats://admin:{SECRET}@127.0.0.1:{free_port()}", connect_timeout=1)

    @app.task
    def f() -> None: ...

    try:
        with pytest.raises(EnqueueError) as info:
            f.delay()
    finally:
        app.close()
    assert SECRET not in str(info.value) and "nats://***@127.0.0.1" in str(info.value)
