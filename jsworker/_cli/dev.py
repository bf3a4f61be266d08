"""``jsworker dev``: a local nats-server with JetStream for development."""

from __future__ import annotations

import signal
import tempfile
import threading
from types import FrameType

import click

from .errors import EXIT_CRASH, EXIT_USAGE, fail


@click.command()
@click.option(
    "--port",
    "-p",
    type=click.IntRange(1, 65535),
    default=4222,
    show_default=True,
    help="Client port on 127.0.0.1.",
)
@click.option(
    "--store-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Where JetStream keeps its data (kept after exit) [default: a temporary directory, "
    "removed on exit].",
)
def dev(port: int, store_dir: str | None) -> None:
    """Start a local nats-server with JetStream on 127.0.0.1 until Ctrl-C."""
    from .._server import NatsServer, PortInUseError, ServerNotFoundError, ServerStartError

    # Both stop signals are handled from before the server starts: one arriving while it
    # starts or while the banner prints must still stop the server and exit 0. SIGINT gets a
    # handler of its own too: Python raises KeyboardInterrupt only when the signal was not
    # ignored at start-up, and a command started in the background by a shell without job
    # control (a CI script, `cmd &` in a script) inherits SIGINT ignored, so Ctrl-C or `kill
    # -INT` would never stop it and its nats-server would outlive it. The handler only notes
    # the signal: an exception raised wherever the signal lands could leave the server
    # process's bookkeeping half done (a lock of its Popen held), and stopping it would hang.
    stopping = threading.Event()

    def stop_soon(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop_soon)
    with tempfile.TemporaryDirectory(prefix="jsworker-dev-") as tmp:
        server = NatsServer(port=port, store_dir=store_dir or tmp)
        try:
            try:
                server.start()
            except PortInUseError:
                in_use = f"port {port} on 127.0.0.1 is already in use; stop what holds it or pass --port"
                fail(in_use, EXIT_USAGE)
            except ServerNotFoundError as exc:
                fail(str(exc), EXIT_USAGE)
            except ServerStartError as exc:
                fail(str(exc), EXIT_CRASH)
            where = f"{server.url}  (store: {server.store_dir}; Ctrl-C stops)"
            click.echo(f"nats-server with JetStream at {where}")
            click.echo(f"  export JSWORKER_URL={server.url}")
            while not stopping.wait(0.5):
                if not server.running:
                    fail("nats-server exited unexpectedly", EXIT_CRASH)
            click.echo("stopping nats-server")
        finally:
            server.stop()
