"""Servers and clusters owned by this interpreter, stopped at exit if nobody stopped them."""

from __future__ import annotations

import atexit
import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .cluster import NatsCluster
    from .process import NatsServer

# Servers that own a process or a temporary directory and were not stopped yet, so that an
# interpreter exiting without stop() (a test run interrupted at the wrong moment, a failed
# start nobody cleaned up) leaves neither a running server nor a directory behind.
OWNED: set[NatsServer | NatsCluster] = set()


@atexit.register
def stop_leftovers() -> None:
    for owner in list(OWNED):
        with contextlib.suppress(Exception):
            owner.stop()
