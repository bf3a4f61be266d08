"""Driving the dashboard from tests: an HTTP client on its ASGI app, its forms' CSRF token,
and the dashboard served by uvicorn on a loopback port (for its event stream and browsers)."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager

import httpx
import uvicorn
from starlette.applications import Starlette

from ..support import free_port, wait_until, wait_until_async

_CSRF = re.compile(r'name="csrf" (?:value|content)="([0-9a-f]+)"')


@asynccontextmanager
async def client(ui: Starlette, base: str = "http://dash") -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of ``ui`` (no server: through its ASGI interface); the dashboard is
    closed after the block."""
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=ui), base_url=base) as http:
            yield http
    finally:
        await ui.state.dashboard.aclose()


def csrf_of(html: str) -> str:
    """The CSRF token a page carries (in its forms, and in its head for scripts)."""
    found = _CSRF.search(html)
    assert found is not None, "the page has no form with a CSRF token"
    return found[1]


async def post(
    http: httpx.AsyncClient,
    path: str,
    data: Mapping[str, str | Sequence[str]] | None = None,
    *,
    page: str = "/",
) -> httpx.Response:
    """Submit a form to ``path`` as the dashboard's own page ``page`` would: with the session
    cookie that page set and the CSRF token it carries."""
    shown = await http.get(page)
    assert shown.status_code == 200, shown.text
    form: dict[str, str | Sequence[str]] = {"csrf": csrf_of(shown.text), **(data or {})}
    return await http.post(path, data=form)


def no_traceback(response: httpx.Response) -> None:
    """A response that is no server error and, when it is an error page, shows no traceback
    (a job's page shows the job's own)."""
    assert response.status_code != 500, response.text
    if response.status_code >= 400:
        assert "Traceback" not in response.text and 'File "' not in response.text, response.text


@asynccontextmanager
async def served(ui: Starlette) -> AsyncIterator[str]:
    """``ui`` served by uvicorn on a free loopback port on this event loop; its base URL."""
    server = uvicorn.Server(
        uvicorn.Config(
            ui,
            host="127.0.0.1",
            port=free_port(),
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=2,
        )
    )
    task = asyncio.create_task(server.serve())
    try:
        await wait_until_async(lambda: server.started or task.done(), timeout=15, message="uvicorn to start")
        if task.done():
            task.result()
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        await task


@contextmanager
def served_in_thread(ui: Starlette) -> Iterator[str]:
    """``ui`` served by uvicorn on a free loopback port, on an event loop of its own in a
    thread (for a test that drives a browser from its own thread); its base URL."""
    server = uvicorn.Server(
        uvicorn.Config(
            ui,
            host="127.0.0.1",
            port=free_port(),
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=2,
        )
    )
    failed: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(server.serve())
        except BaseException as exc:  # reported to the test below
            failed.append(exc)

    thread = threading.Thread(target=run, name="uvicorn", daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or failed, timeout=15, message="uvicorn to start")
        if failed:
            raise failed[0]
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(15)
