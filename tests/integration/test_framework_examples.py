"""The web framework examples (examples/fastapi_app, examples/django_app, examples/flask_app)
run as their READMEs say: the web app under its real server, a ``jsworker run`` worker beside
it, requests from a client, each process stopped by its pid at the end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from jsworker.testing import NatsServer

from .. import launcher
from ..support import connections, stream_state, wait_until
from .workers import ROOT, stop

EXAMPLES = ROOT / "examples"


def _env(url: str, **more: str) -> dict[str, str]:
    return {**os.environ, "JSWORKER_URL": url, "PYTHONWARNINGS": "always::ResourceWarning", **more}


@contextmanager
def _worker(
    example: Path, url: str, log: Path, module: str = "tasks", **env: str
) -> Iterator[launcher.Launched]:
    """``jsworker run <module>`` in the example's directory, as its docs start it."""
    proc = launcher.start(
        ["run", module, "--log-level", "warning"], env=_env(url, **env), stdout=log, cwd=example
    )
    try:
        yield proc
    finally:
        assert stop(proc) == 0, log.read_text()


@contextmanager
def _served(
    argv: list[str], example: Path, url: str, sock: Path, log: Path, stopped: str, **env: str
) -> Iterator[httpx.Client]:
    """A web server of the example's, listening on the unix socket ``sock`` (no port to race
    for); a client of it. On SIGTERM the server must say ``stopped`` and exit cleanly (0, or
    the signal raised again once it has shut down, as uvicorn does), saying nothing alarming."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv,
            cwd=example,
            env=_env(url, **env),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_until(
            lambda: sock.exists() or proc.poll() is not None, timeout=60, message=f"{argv[0]} listening"
        )
        assert proc.poll() is None, log.read_text()
        with httpx.Client(
            transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://example", timeout=30
        ) as client:
            yield client
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    said = log.read_text()
    assert code in (0, -signal.SIGTERM), said
    assert stopped in said, said
    # gunicorn leaves its own listening socket to the collector: only the rest counts.
    lines = [line for line in said.splitlines() if str(sock) not in line and "Enable tracemalloc" not in line]
    for alarming in ("Traceback", "ResourceWarning", "Task was destroyed", "Unclosed"):
        assert not [line for line in lines if alarming in line], said


def test_the_fastapi_example_enqueues_waits_for_a_result_and_shuts_down_cleanly(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    example, sock = EXAMPLES / "fastapi_app", tmp_path / "web.sock"
    server = [sys.executable, "-m", "uvicorn", "web:api", "--uds", str(sock)]
    with (
        _worker(example, nats_server.url, tmp_path / "worker.log"),
        _served(
            server, example, nats_server.url, sock, tmp_path / "web.log", "Application shutdown complete"
        ) as web,
    ):
        answer = web.post("/thumbnails", json={"path": "cat.png", "width": 640})
        assert answer.status_code == 202, answer.text
        job_id = answer.json()["job_id"]
        done = web.get(f"/thumbnails/{job_id}/result", params={"wait": 20})
        assert done.json() == {"job_id": job_id, "thumbnail": "cat-640w.png"}
        assert web.get(f"/thumbnails/{job_id}").json()["state"] == "succeeded"
        assert web.get("/thumbnails/no-such-job").status_code == 404


# Runs the FastAPI example's lifespan in a loop that goes on after it, each step once the test
# answers on stdin: the connection must end with the lifespan, not with the loop (which would
# close it anyway, since jsworker ties each connection to its loop).
_LIFESPAN = """
import asyncio, sys
from web import api, thumbnail

async def told(what):
    print(what, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

async def main():
    async with api.router.lifespan_context(api):
        await thumbnail.adelay("a.png", 1)
        await told("enqueued")
    await told("closed")

asyncio.run(main())
"""


def test_the_fastapi_examples_lifespan_closes_the_apps_connection(nats_server: NatsServer) -> None:
    def clients() -> int:
        return len(connections(nats_server.monitoring_url))

    with subprocess.Popen(
        [sys.executable, "-c", _LIFESPAN],
        cwd=EXAMPLES / "fastapi_app",
        env=_env(nats_server.url),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            assert proc.stdout.readline() == "enqueued\n"
            assert clients() == 1
            proc.stdin.write("\n")
            proc.stdin.flush()
            assert proc.stdout.readline() == "closed\n"
            # The lifespan is over and the loop still runs: the server lets the connection go.
            wait_until(lambda: clients() == 0, timeout=10, message="the app's connection closed")
            proc.stdin.write("\n")
            proc.stdin.flush()
            assert proc.wait(30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()


def _gunicorn(app: str, sock: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "gunicorn", app, "--bind", f"unix:{sock}", "--workers", "2", *args]


def test_the_django_example_enqueues_on_commit_and_nothing_for_a_rolled_back_request(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """Orders placed through the project under gunicorn: the receipt job of a committed order
    runs in a worker that set Django up (``jsworker run worker``) and marks the order; an order
    whose request failed after its row was written rolled back, and no job was ever stored."""
    example, sock = EXAMPLES / "django_app", tmp_path / "web.sock"
    env = {"SHOP_DB": str(tmp_path / "shop.sqlite3")}
    migrated = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--verbosity", "0"],
        cwd=example,
        env=_env(nats_server.url, **env),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert migrated.returncode == 0, migrated.stderr
    with (
        _worker(example, nats_server.url, tmp_path / "worker.log", "worker", **env),
        _served(
            _gunicorn("shop.wsgi", sock),
            example,
            nats_server.url,
            sock,
            tmp_path / "web.log",
            "Shutting down",
            **env,
        ) as web,
    ):
        refused = web.post("/orders", json={"email": "eve@example.com", "coupon": "EXPIRED"})
        assert refused.status_code == 400, refused.text
        placed = web.post("/orders", json={"email": "ada@example.com"})
        assert placed.status_code == 201, placed.text
        order = placed.json()["order"]
        wait_until(
            lambda: web.get(f"/orders/{order}").json()["receipt_sent"], timeout=30, message="the receipt sent"
        )
    assert stream_state(nats_server.url, "JSW_SHOP").last_seq == 1  # one job ever: the committed order's


def test_the_flask_example_enqueues_from_gunicorns_forked_workers(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """The Flask app imported once and forked into two gunicorn workers (``--preload``): the
    web workers enqueue from sync views and wait for results, and every report gets built."""
    example, sock = EXAMPLES / "flask_app", tmp_path / "web.sock"
    server = _gunicorn("web:flask_app", sock, "--preload")
    with (
        _worker(example, nats_server.url, tmp_path / "worker.log"),
        _served(server, example, nats_server.url, sock, tmp_path / "web.log", "Shutting down") as web,
    ):
        months = [f"2026-{m:02d}" for m in range(1, 13)]
        ids = []
        for month in months:
            answer = web.post("/reports", json={"customer": "acme", "month": month})
            assert answer.status_code == 202, answer.text
            ids.append(answer.json()["job_id"])
        built = [web.get(f"/reports/{job_id}", params={"wait": 20}).json() for job_id in ids]
        assert [b["report"]["month"] for b in built] == months
        assert web.get("/reports/no-such-job").status_code == 404
