"""The ``jsworker`` command.

Exit codes: 0 ok, 1 crashed, 2 import or usage error, 3 cannot connect to NATS (or it refused
a permission the command needs).
"""

from __future__ import annotations

import click

from .._version import __version__
from .dev import dev
from .dlq import dlq
from .doctor import doctor
from .enqueue import enqueue
from .events import events
from .jobs import jobs
from .permissions import permissions
from .provision import provision
from .queues import queues
from .run import run
from .schedules import schedules
from .status import status
from .ui import ui
from .workers import workers


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="jsworker")
def cli() -> None:
    """jsworker: a task queue on NATS JetStream."""


cli.add_command(run)
cli.add_command(dev)
cli.add_command(status)
cli.add_command(dlq)
cli.add_command(events)
cli.add_command(permissions)
cli.add_command(provision)
cli.add_command(schedules)
cli.add_command(jobs)
cli.add_command(workers)
cli.add_command(queues)
cli.add_command(ui)
cli.add_command(doctor)
cli.add_command(enqueue)


def main() -> None:
    """Entry point of the ``jsworker`` console script."""
    cli(prog_name="jsworker")
