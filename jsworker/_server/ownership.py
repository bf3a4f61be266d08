"""Servers and clusters owned by this interpreter, stopped at exit if nobody stopped them."""

from __future__ import annotations

import atexit
import contextlib
from typing import Protocol


class Owner(Protocol):
    """A server or a cluster (:class:`~.process.NatsServer`, :class:`~.cluster.NatsCluster`):
    both register here, so this module names neither."""

    def stop(self) -> None:
        """Stop it and remove what it owns."""
        ...


# Servers that own a process or a temporary directory and were not stopped yet, so that an
# interpreter exiting without stop() (a test run interrupted at the wrong moment, a failed
# start nobody cleaned up) leaves neither a running server nor a directory behind.
OWNED: set[Owner] = set()


@atexit.register
def stop_leftovers() -> None:
    for owner in list(OWNED):
        with contextlib.suppress(Exception):
            owner.stop()
