"""A redis-server for Dramatiq: loopback only, no persistence, owned by this object.

The port is one the kernel just handed out; a random password makes sure the clients talk
to this server and not to anything else that might have taken the port meanwhile.
"""

from __future__ import annotations

import secrets
import socket
import subprocess
import tempfile
import time
from pathlib import Path

HOST = "127.0.0.1"
START_TIMEOUT = 15.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _ping(port: int, password: str) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1) as s:
            s.sendall(f"AUTH {password}\r\nPING\r\n".encode())
            reply = b""
            while b"PONG" not in reply and len(reply) < 200:
                chunk = s.recv(100)
                if not chunk:
                    break
                reply += chunk
            return reply.startswith(b"+OK") and b"+PONG" in reply
    except OSError:
        return False


class RedisServer:
    """Start with ``with RedisServer(binary) as r: r.url``; stopped by its own pid."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.password = secrets.token_hex(16)
        self._dir = tempfile.TemporaryDirectory(prefix="jsw-bench-redis-")
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Client URL with the password."""
        return f"redis://:{self.password}@{HOST}:{self.port}/0"

    def start(self) -> None:
        """Start on a fresh port; raise when it does not answer in time."""
        for _ in range(3):
            self.port = _free_port()
            log = Path(self._dir.name) / "redis.log"
            argv = [self.binary, "--bind", HOST, "--port", str(self.port), "--requirepass", self.password]
            argv += ["--save", "", "--appendonly", "no", "--dir", self._dir.name, "--logfile", str(log)]
            self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + START_TIMEOUT
            while time.monotonic() < deadline and self.proc.poll() is None:
                if _ping(self.port, self.password):
                    return
                time.sleep(0.05)
            # Most likely the port was taken between picking and binding: try another.
            self.stop()
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._dir.cleanup()
