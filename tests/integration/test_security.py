"""Authentication and TLS against servers that enforce them; secrets stay out of the output."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import nacl.signing
import nkeys  # type: ignore[import-untyped]
import pytest

from jsworker import App
from jsworker.testing import NatsServer

from .. import launcher
from ..support import need
from .workers import worker_env

SECRET = "s3cr3t-Pa55"


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[list[NatsServer]]:
    """Servers started by a test with its own flags; stopped afterwards."""
    started: list[NatsServer] = []
    yield started
    for server in started:
        server.stop()


def _start(started: list[NatsServer], *args: str) -> NatsServer:
    server = NatsServer(extra_args=list(args))
    started.append(server)
    return server.start()


def _run_worker(url: str, *flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = ["run", "acceptance_app", "--url", url, *flags]
    return launcher.run(argv, env={**worker_env(url), **(env or {})}, timeout=30)


async def _enqueue(app: App) -> int:
    @app.task
    async def ping() -> None: ...

    try:
        return (await ping.adelay()).seq
    finally:
        await app.aclose()


def test_wrong_password_exits_3_without_printing_it(server_factory: list[NatsServer]) -> None:
    """A worker with a bad password: exit 3, one clear line, and the password nowhere in the output."""
    server = _start(server_factory, "--user", "worker", "--pass", SECRET)
    result = _run_worker(server.url, "--user", "worker", "--password", "wrong-" + SECRET)
    assert result.returncode == 3, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "uthorization" in lines[0]
    assert SECRET not in result.stderr + result.stdout


def test_user_password_from_environment_works(
    server_factory: list[NatsServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """JSWORKER_USER / JSWORKER_PASSWORD authenticate producers without any code change;
    arguments given to App win over them."""
    server = _start(server_factory, "--user", "worker", "--pass", SECRET)
    monkeypatch.setenv("JSWORKER_USER", "worker")
    monkeypatch.setenv("JSWORKER_PASSWORD", SECRET)
    assert asyncio.run(_enqueue(App("sec", server.url))) == 1
    refused = App("sec", server.url, password="nope", connect_timeout=2)
    with pytest.raises(Exception, match="uthorization"):
        asyncio.run(_enqueue(refused))


def test_token_auth(server_factory: list[NatsServer], monkeypatch: pytest.MonkeyPatch) -> None:
    """A token from JSWORKER_TOKEN is used when the App names none."""
    server = _start(server_factory, "--auth", SECRET)
    monkeypatch.setenv("JSWORKER_TOKEN", SECRET)
    assert asyncio.run(_enqueue(App("sec", server.url))) == 1


def test_nkey_seed_auth(server_factory: list[NatsServer], tmp_path: Path) -> None:
    """An NKey seed file authenticates against a server that knows the public key."""
    raw = nacl.signing.SigningKey.generate().encode()
    seed = nkeys.encode_seed(raw, nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    seed_file = tmp_path / "user.nk"
    seed_file.write_bytes(seed)
    config = tmp_path / "auth.conf"
    config.write_text(f'authorization {{ users = [ {{ nkey: "{public}" }} ] }}\n')
    server = _start(server_factory, "-c", str(config))
    assert asyncio.run(_enqueue(App("sec", server.url, nkey_seed=str(seed_file)))) == 1


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    """A throwaway CA with a server certificate for 127.0.0.1 and a client certificate."""
    need(shutil.which("openssl") is not None, "openssl is needed to make test certificates")
    d = tmp_path / "pki"
    d.mkdir()
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
             "-days", "1", "-subj", "/CN=jsworker-test-ca", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={name}", cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.pem", "-days", "1", "-extfile", "san.ext", cwd=d)  # fmt: skip
    return d


@pytest.mark.slow
def test_mutual_tls_with_password(server_factory: list[NatsServer], pki: Path) -> None:
    """A server requiring client certificates and a password: a worker with both works, without the
    client certificate it is refused (exit 3)."""
    server = _start(
        server_factory,
        "--tls", "--tlscert", str(pki / "server.pem"), "--tlskey", str(pki / "server.key"),
        "--tlsverify", "--tlscacert", str(pki / "ca.pem"),
        "--user", "worker", "--pass", SECRET,
    )  # fmt: skip
    tls = {"JSWORKER_TLS_CA": str(pki / "ca.pem"), "JSWORKER_USER": "worker", "JSWORKER_PASSWORD": SECRET}
    client_cert = {"JSWORKER_TLS_CERT": str(pki / "client.pem"), "JSWORKER_TLS_KEY": str(pki / "client.key")}

    without_cert = _run_worker(server.url, env=tls)
    assert without_cert.returncode == 3, without_cert.stderr

    proc = subprocess.Popen(
        [sys.executable, "-m", "jsworker", "run", "acceptance_app", "--url", server.url],
        env={**worker_env(server.url), **tls, **client_cert},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "worker.started" in line, line
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert SECRET not in line + out
