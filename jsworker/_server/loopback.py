"""Loopback networking helpers: free ports on 127.0.0.1 and HTTP to our own monitoring port."""

from __future__ import annotations

import atexit
import contextlib
import http.client
import os
import random
import socket
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

HOST = "127.0.0.1"
HTTP_TIMEOUT = 2.0

# A proxy configured in the environment must never see (or swallow) requests to our own
# loopback monitoring port.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def port_is_free(port: int) -> bool:
    """Whether 127.0.0.1:port can be bound right now (a hint only: it may be taken a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if os.name == "posix":
            # Matches what the server itself does, so connections of a previous run still in
            # TIME_WAIT on this port do not count as "in use"; a listening socket still does.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


# Where listening ports are chosen: below the range the OS gives outgoing connections their
# local ports from. A server killed and restarted on its port (a test of an outage) would
# otherwise find it taken by some client's connection in between, on a busy machine.
_LOWEST_LISTEN_PORT = 10_000
_EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"


def _ephemeral_low() -> int:
    """The lowest port the OS hands out to outgoing connections (Linux says; 32768 else)."""
    try:
        with open(_EPHEMERAL_RANGE, encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Ports picked here, one file each holding the picker's pid: a port stays its picker's for as
# long as that process lives, so a server it killed finds its port free again when it starts
# it again, whatever other processes (the other workers of a parallel test run) picked while
# it was down. A file whose process is gone is claimed anew.
_CLAIMS = Path(tempfile.gettempdir()) / f"jsworker-ports-{os.getuid() if hasattr(os, 'getuid') else 0}"
_claimed: set[int] = set()


def _claim(port: int) -> bool:
    """Claim ``port`` for this process; False when a live process claimed it first (this one
    included: a port it picked before may belong to a server it will start again)."""
    path = _CLAIMS / str(port)
    for _ in range(2):
        try:
            _CLAIMS.mkdir(exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            if _claimer_alive(path):
                return False
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            continue
        except OSError:
            return True  # no claims here (a read-only temporary directory): as before them
        with os.fdopen(fd, "w") as claim:
            claim.write(str(os.getpid()))
        if not _claimed:
            atexit.register(_release)
        _claimed.add(port)
        return True
    return False


def _claimer_alive(path: Path) -> bool:
    try:
        pid = int(path.read_text() or "0")
    except (OSError, ValueError):
        return True  # being written this instant, or unreadable: not ours to take
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # alive, another user's
    return True


def _release() -> None:
    """Give this process's ports back as it exits (only its own: a forked child that exits
    this way leaves its parent's claims alone)."""
    mine = str(os.getpid())
    for port in _claimed:
        path = _CLAIMS / str(port)
        with contextlib.suppress(OSError):
            if path.read_text() == mine:
                path.unlink()


def pick_port() -> int:
    """A port free on 127.0.0.1 now, below the ports outgoing connections get, for a server to
    listen on, and claimed by no live process that picked one here (chosen at random: the
    caller must still cope with losing it to another program)."""
    low = _ephemeral_low()
    if low > _LOWEST_LISTEN_PORT + 1000:
        for _ in range(100):
            port = random.randint(_LOWEST_LISTEN_PORT, low - 1)
            if port_is_free(port) and _claim(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def http_get(url: str, timeout: float = HTTP_TIMEOUT) -> tuple[int, bytes]:
    """(status, body) of a GET; status 0 when there was no HTTP answer at all."""
    try:
        with _OPENER.open(url, timeout=timeout) as resp:
            return int(resp.status), bytes(resp.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return int(exc.code), bytes(exc.read())
    except (OSError, http.client.HTTPException):
        return 0, b""


def port_of(url: str) -> int:
    port = urlsplit(url).port
    if port is None:
        raise ValueError(f"no port in {url!r}")
    return port
