"""``create_app(app)``: the dashboard of a jsworker app as an ASGI application."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from ..jetstream.session import SessionRole
from ._pages import bulk, charts, dead_letters, job, jobs, overview, queues, schedules, workers
from ._security import Credentials, Gate, parse_auth
from ._web import SECURITY_HEADERS, Dashboard, Settings, problem_page

if TYPE_CHECKING:
    from .._app import App

# A form is a few ids and a token; nothing the dashboard takes is larger.
_MAX_BODY = 1024 * 1024


def create_app(
    app: App,
    *,
    auth: str | tuple[str, str] | None = None,
    token: str | None = None,
    read_only: bool = False,
    payloads: bool = True,
    role: SessionRole = "dashboard",
) -> Starlette:
    """The dashboard of ``app`` (docs/dashboard.md), an ASGI application to serve with
    uvicorn or mount in your own (``Mount("/jobs", create_app(app))``).

    It reads and acts through one :class:`~jsworker.admin.Admin` connection, as the app's
    ``dashboard`` role (``jsworker permissions``: an operator's reads and the dashboard's
    actions only; ``role="operator"`` connects as the operator instead). ``auth``
    (``"user:password"``) asks for HTTP Basic, ``token`` for a bearer token (or its cookie,
    set once from a ``?token=`` link); with both, either passes; with neither, anyone who
    reaches it gets in (mounted in your app, put your own authentication in front).
    ``read_only`` hides every action and refuses them (403); ``payloads=False`` never shows
    a job's payload or result. The returned app's ``state.dashboard`` is the
    :class:`~jsworker.ui._web.Dashboard`; its lifespan closes the connection (``await
    app.state.dashboard.aclose()`` where a mounted app's lifespan does not run).
    """
    credentials = Credentials(parse_auth(auth), token or None)
    board = Dashboard(app, Settings(read_only=read_only, payloads=payloads), role)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await board.aclose()

    routes = [
        *overview.routes,
        *charts.routes,
        *queues.routes,
        *jobs.routes,  # before job's: /jobs/cancel is an action, /jobs/<id> a job
        *bulk.routes,
        *job.routes,
        *dead_letters.routes,
        *schedules.routes,
        *workers.routes,
        Mount("/static", StaticFiles(packages=[("jsworker.ui", "static")]), name="static"),
    ]
    web = Starlette(
        routes=routes,
        middleware=[Middleware(Gate, credentials=credentials)],
        # An unknown path or a GET on an action: the dashboard's own page, with its status.
        exception_handlers={HTTPException: _routing_problem},
        lifespan=lifespan,
        max_body_size=_MAX_BODY,
    )
    web.state.dashboard = board
    return web


async def _routing_problem(request: Request, exc: Exception) -> Response:
    response = problem_page(request, exc)
    response.headers.update(SECURITY_HEADERS)
    if isinstance(exc, HTTPException) and exc.headers:
        response.headers.update(exc.headers)  # a 405's Allow
    return response
