"""What a worker logs holds no job arguments and no terminal control sequences from messages."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from jsworker import App

from ..support import wait_until
from .workers import records, start_worker, stop

if TYPE_CHECKING:
    from jsworker.testing import NatsServer

CARD = "4111111111111111"


@pytest.mark.parametrize("log_format", ["json", "console"])
def test_tracebacks_carry_no_local_variables(
    nats_server: NatsServer, tmp_path: Path, log_format: str
) -> None:
    record, log = tmp_path / "record", tmp_path / "worker.log"
    app = App("secret", nats_server.url)

    @app.task(name="charge")
    def charge(card_number: str, cents: int) -> None: ...

    args = ("--log-format", log_format, "--log-level", "info")
    try:
        proc = start_worker(nats_server.url, record, log, *args, module="secret_app")
        try:
            charge.delay(CARD, 999)
            wait_until(lambda: records(record), timeout=30, message="the charge to run")
            wait_until(lambda: "job.dead_lettered" in log.read_text(), timeout=30, message="its dead letter")
        finally:
            stop(proc)
        text = log.read_text()
        assert "charge.failed" in text and "declined" in text  # the traceback is there ...
        assert CARD not in text  # ... without the locals that hold the arguments
    finally:
        app.close()


def test_control_characters_from_messages_are_escaped(nats_server: NatsServer, tmp_path: Path) -> None:
    record, log = tmp_path / "record", tmp_path / "worker.log"
    app = App("secret", nats_server.url)

    @app.task(name="shout")
    def shout(text: str) -> None: ...

    try:
        proc = start_worker(nats_server.url, record, log, "--log-level", "info", module="secret_app")
        try:
            shout.delay("\x1b[2J\x1b[31mfake line\n2026 [error] forged" + "x" * 5000)
            wait_until(lambda: records(record), timeout=30, message="the task to run")
            wait_until(lambda: "shout" in log.read_text(), timeout=30, message="its log line")
        finally:
            stop(proc)
        text = log.read_text()
        assert "\x1b" not in text and "\\x1b[2J" in text
        assert "\n2026 [error] forged" not in text
        assert "x" * 1001 not in text and "characters)" in text
    finally:
        app.close()
