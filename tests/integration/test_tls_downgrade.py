"""A server (or anything on the path) that does not start TLS never receives credentials when
TLS is configured: the connection is refused before CONNECT is sent."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jsworker import ConnectError
from jsworker.jetstream.connection import Connection, ConnectOptions

from .. import launcher
from ..support import need
from .workers import worker_env

SECRET = "Pl41nT3xtPassw0rd"


class FakeServer:
    """Speaks the first line of the NATS protocol (INFO, without TLS) and records what the
    client sends afterwards."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = int(self.sock.getsockname()[1])
        self.received = bytearray()
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        info = {
            "server_id": "fake",
            "version": "2.15.1",
            "proto": 1,
            "max_payload": 1048576,
            "auth_required": True,
        }
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.sendall(b"INFO " + json.dumps(info).encode() + b"\r\n")
                conn.settimeout(1.0)
                try:
                    while chunk := conn.recv(65536):
                        self.received += chunk
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    server = FakeServer()
    yield server
    server.close()


@pytest.fixture
def ca_file(tmp_path: Path) -> str:
    """A self-signed certificate to name as CA: the fake server never gets to a handshake."""
    need(shutil.which("openssl") is not None, "openssl is needed to make a test certificate")
    key, cert = tmp_path / "ca.key", tmp_path / "ca.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=jsworker test CA"],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return str(cert)


@pytest.mark.parametrize("configured", ["tls:// URL", "a CA file"])
@pytest.mark.anyio
async def test_no_credential_leaves_the_process(
    fake_server: FakeServer, configured: str, ca_file: str
) -> None:
    tls_url = configured == "tls:// URL"
    options = ConnectOptions(
        servers=[f"{'tls' if tls_url else 'nats'}://127.0.0.1:{fake_server.port}"],
        user="admin",
        password=SECRET,
        tls_ca=None if tls_url else ca_file,
        connect_timeout=3,
    )
    with pytest.raises(ConnectError, match="did not offer TLS"):
        await Connection.open(options)
    assert fake_server.connections >= 1
    assert SECRET.encode() not in fake_server.received
    assert b"CONNECT" not in fake_server.received


def test_a_worker_refuses_with_exit_code_3(fake_server: FakeServer) -> None:
    url = f"tls://127.0.0.1:{fake_server.port}"
    result = launcher.run(
        ["run", "acceptance_app", "--url", url, "--user", "admin"],
        env={**worker_env(url), "JSWORKER_PASSWORD": SECRET},
        timeout=60,
    )
    assert result.returncode == 3, result.stderr
    assert "did not offer TLS" in result.stderr
    assert SECRET.encode() not in fake_server.received
