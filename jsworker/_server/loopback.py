"""Loopback networking helpers: free ports on 127.0.0.1 and HTTP to our own monitoring port."""

from __future__ import annotations

import http.client
import os
import random
import socket
import urllib.error
import urllib.request
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


def pick_port() -> int:
    """A port free on 127.0.0.1 now, below the ports outgoing connections get, for a server to
    listen on (chosen at random: the caller must cope with losing it to another process)."""
    low = _ephemeral_low()
    if low > _LOWEST_LISTEN_PORT + 1000:
        for _ in range(100):
            port = random.randint(_LOWEST_LISTEN_PORT, low - 1)
            if port_is_free(port):
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
