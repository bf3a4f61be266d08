"""What a worker process tells its supervisor, over a one-way pipe.

Messages are a kind byte and a UTF-8 text: ``R`` ready (the worker took up its queues), ``F``
failed to start (the reason), ``M`` a metrics snapshot (Prometheus text), ``X`` it is
stopping to be replaced (the reason: ``jobs`` or ``memory``), ``E`` its worker has stopped and
the process is about to exit (the exit code it will exit with): its jobs are all settled or
handed back, so what is left is the interpreter's exit. No pickle crosses it.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection


class Kind(bytes, enum.Enum):
    """The kinds of message."""

    READY = b"R"
    FAILED = b"F"
    METRICS = b"M"
    RECYCLING = b"X"
    EXITING = b"E"


def encode(kind: Kind, text: str = "") -> bytes:
    """One message."""
    return kind.value + text.encode()


def decode(data: bytes) -> tuple[Kind, str]:
    """``(kind, text)`` of one message; ValueError for an unknown kind."""
    return Kind(data[:1]), data[1:].decode(errors="replace")


class ChildChannel:
    """The worker process's end.

    A send that fails means the supervisor is gone: :attr:`orphaned` turns True, and the
    worker stops, so no process outlives its supervisor for long. Sends from several threads
    (the periodic snapshot runs off the event loop) never interleave.
    """

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        # A snapshot is larger than a pipe's atomic write: two writers at once would mix
        # their bytes, and the supervisor would lose the message.
        self._lock = threading.Lock()
        self.orphaned = False

    def send(self, kind: Kind, text: str = "") -> None:
        """Send one message (blocking; a pipe write of at most one snapshot)."""
        with self._lock:
            self._send(kind, text)

    def send_snapshot(self, take: Callable[[], str]) -> None:
        """Send the metrics snapshot ``take()`` returns, taken under the channel's lock: the
        supervisor keeps the last snapshot it gets, so a snapshot taken earlier must not
        arrive later."""
        with self._lock:
            self._send(Kind.METRICS, take())

    def _send(self, kind: Kind, text: str) -> None:
        if self.orphaned:
            return
        try:
            self._conn.send_bytes(encode(kind, text))
        except OSError:  # BrokenPipeError: the supervisor exited
            self.orphaned = True
