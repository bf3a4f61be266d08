"""docs/testing.md's example tests, run as a user's would be: the page's block written to a test
module of its own and run by pytest in a process of its own, with jsworker's pytest plugin."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jsworker import App, ConnectError
from jsworker.testing import running_worker, worker_thread

from ..support import free_port

ROOT = Path(__file__).parents[2]
PAGE = ROOT / "docs" / "testing.md"
MARKER = "<!-- run by tests/integration/test_testing_docs.py -->\n```python\n"

# What a project running its async tests with anyio's pytest plugin has: auto mode in its
# pytest configuration, and asyncio (jsworker's loop) as the backend in its conftest.py.
INI = "[pytest]\nanyio_mode = auto\n"
CONFTEST = """
import pytest


@pytest.fixture
def anyio_backend():
    return "asyncio"
"""


def test_the_testing_pages_example_tests_pass(tmp_path: Path) -> None:
    page = PAGE.read_text(encoding="utf-8")
    start = page.index(MARKER) + len(MARKER)
    (tmp_path / "test_from_docs.py").write_text(page[start : page.index("```", start)])
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text(INI)
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(tmp_path)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "2 passed" in ran.stdout, ran.stdout


@pytest.mark.anyio
async def test_a_worker_that_cannot_start_raises_its_error_at_the_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JSWORKER_CONNECT_TIMEOUT", "1")
    app = App("nowhere", f"nats://127.0.0.1:{free_port()}")

    @app.task
    async def noop() -> None: ...

    with pytest.raises(ConnectError, match="cannot connect"):
        async with running_worker(app):
            pytest.fail("the block ran without a worker")


def test_a_worker_thread_that_cannot_start_raises_its_error_at_the_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JSWORKER_CONNECT_TIMEOUT", "1")
    app = App("nowhere", f"nats://127.0.0.1:{free_port()}")

    @app.task
    async def noop() -> None: ...

    with pytest.raises(ConnectError, match="cannot connect"), worker_thread(app):
        pytest.fail("the block ran without a worker")
