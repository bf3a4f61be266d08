"""Loopback networking helpers: free ports on 127.0.0.1 and HTTP to our own monitoring port."""

from __future__ import annotations

import http.client
import os
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


def pick_port() -> int:
    """A port the OS considers free on 127.0.0.1 now; the caller must cope with losing it."""
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
