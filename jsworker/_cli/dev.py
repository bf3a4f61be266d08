"""``jsworker dev``: a local nats-server with JetStream for development."""

from __future__ import annotations

import signal
import tempfile
import time
from types import FrameType

import click

from .errors import EXIT_CRASH, EXIT_USAGE, fail

#: Seconds between looks at the stop flag and the server: how late a stop may begin.
_LOOK_EVERY = 0.2


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
    # A plain flag, not a threading.Event: the handler runs in the main thread, and setting an
    # Event takes its lock, which that thread may hold right then inside Event.wait (a hang,
    # seen once in a few hundred stops).
    stopping: list[int] = []

    def stop_soon(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)

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
            while not stopping:
                if not server.running:
                    fail("nats-server exited unexpectedly", EXIT_CRASH)
                time.sleep(_LOOK_EVERY)
            click.echo("stopping nats-server")
        finally:
            server.stop()
