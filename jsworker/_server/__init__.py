"""Local nats-server processes with JetStream, for ``jsworker dev`` and for tests.

Every server started here listens on 127.0.0.1 only and is owned by the object that started
it: it is signalled through its own process handle, never looked up by name or port. Ports
the server picks itself are read back from the ports file it writes for its own pid, so a
port reported here certainly belongs to our process and not to whatever else runs on the
machine.
"""

from __future__ import annotations

from .binary import ENV_BINARY, ServerNotFoundError, find_nats_server
from .cluster import NatsCluster
from .process import NatsServer, PortInUseError, ServerStartError

__all__ = [
    "ENV_BINARY",
    "NatsCluster",
    "NatsServer",
    "PortInUseError",
    "ServerNotFoundError",
    "ServerStartError",
    "find_nats_server",
]
