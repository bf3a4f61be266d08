"""The dashboard's plumbing: its state (:class:`Dashboard`), the wrappers every page and action
runs in (:func:`page`, :func:`action`), and rendering.

A page (GET) only reads; an action (POST) only acts, and is refused in read-only mode (403),
without a valid CSRF token (403) or with a body that is not a form (400). An action writes one
``ui.action`` log line (who, what, which jobs: never a payload), then redirects to a page with
what it did as a flash message. Every failure becomes a page with a status and one sentence
(:mod:`jsworker.ui._errors`), never a traceback.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from .._core.paging import is_seq
from .._core.queues import QueueStatus
from .._errors import ConfigurationError
from .._observability.logging import get_logger
from .._scheduling.cron import as_written
from ..admin import Admin
from ..jetstream.session import SessionRole
from . import _formats as formats
from ._errors import describe, refuse
from ._feed import Feed
from ._running import Bulk
from ._security import CSRF_FIELD, FLASH_COOKIE, SESSION_COOKIE, Signer, cookie_path, new_session

if TYPE_CHECKING:
    from .._app import App

log = get_logger("jsworker.ui")

#: Seconds a page or an action may take before it gives up (504).
REQUEST_TIMEOUT = 30.0
#: The most items of one list an audit line names (it gives the count of the others too).
AUDITED = 20
#: The most jobs or dead letters one action takes.
MAX_SELECTED = 1000
#: Sent with every page: no framing, no inline script, nothing loaded from elsewhere.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


_WORKER_FIELDS = (
    "id",
    "host",
    "pid",
    "queue_list",
    "running",
    "concurrency",
    "done",
    "age",
    "seen",
    "version",
    "state",
)


@dataclass(frozen=True, slots=True)
class Settings:
    """What the dashboard lets people do: act (unless ``read_only``), see payloads and results
    (unless not ``payloads``)."""

    read_only: bool = False
    payloads: bool = True


class Dashboard:
    """One dashboard of ``app``: its Admin connection, its live feed, its signing key."""

    def __init__(self, app: App, settings: Settings, role: SessionRole = "dashboard") -> None:
        self.app = app
        self.settings = settings
        self.admin = Admin(app, purpose="ui", role=role)
        self.feed = Feed(self.admin)
        self.signer = Signer()
        #: Replays of every dead letter of a task, by task, running beside the requests: a
        #: page says one runs, and the dead letters' count falls as it goes.
        self.replays: dict[str, asyncio.Task[None]] = {}
        #: Actions on every job a listing matches, by what and which (see ._pages.bulk).
        self.bulks: dict[str, Bulk] = {}
        self.templates = Environment(
            loader=PackageLoader("jsworker.ui", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.filters.update(
            age=formats.age,
            when=formats.when,
            moment=formats.moment,
            header=formats.header,
            duration=formats.duration,
            number=formats.number,
            size=formats.size,
            cron=as_written,
            plural=counted,
        )
        # The empty rows the live tables copy for a queue or a worker that comes along.
        self.templates.globals.update(blank_queue=QueueStatus(""), blank_worker=dict.fromkeys(_WORKER_FIELDS))

    async def aclose(self) -> None:
        """Stop the live feed and any replay or action on all matching jobs still running,
        then close the NATS connection."""
        running = [*self.replays.values(), *(b.runner for b in self.bulks.values() if b.runner is not None)]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        await self.feed.aclose()
        await self.admin.aclose()


def dashboard(request: Request) -> Dashboard:
    """The dashboard serving ``request``."""
    found: Dashboard = request.app.state.dashboard
    return found


# -- rendering -----------------------------------------------------------------------------


def root(request: Request) -> str:
    """The path the dashboard is mounted at ("" at the top)."""
    return str(request.scope.get("root_path") or "").rstrip("/")


def link(request: Request, path: str, **query: Any) -> str:
    """The dashboard's ``path`` with ``query`` (None values left out)."""
    given = {k: v for k, v in query.items() if v is not None and v != ""}
    return root(request) + path + (f"?{urlencode(given)}" if given else "")


def render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """``template`` rendered for ``request`` with ``context``."""
    d = dashboard(request)
    session = getattr(request.state, "session", None) or ""
    html = d.templates.get_template(template).render(
        request=request,
        root=root(request),
        link=lambda path, **q: link(request, path, **q),
        app_name=d.app.name,
        settings=d.settings,
        csrf_field=CSRF_FIELD,
        csrf=d.signer.csrf_token(session),
        flash=getattr(request.state, "flash", None),
        here=request.url.path + (f"?{request.url.query}" if request.url.query else ""),
        rendered_at=time.time(),
        **context,
    )
    return HTMLResponse(html, status_code=status)


def problem_page(request: Request, exc: BaseException) -> HTMLResponse:
    """The page for ``exc``: its status and one sentence."""
    problem = describe(exc)
    if problem.status >= 500 and problem.title == "Unexpected error":
        log.error("ui.failed", path=request.url.path, exc_info=exc)
    return render(request, "error.html", problem.status, problem=problem)


# -- pages and actions ---------------------------------------------------------------------

PageHandler = Callable[[Request, Dashboard], Awaitable[Response]]
ActionHandler = Callable[[Request, Dashboard, FormData], Awaitable[tuple[str, str]]]


def page(handler: PageHandler) -> Callable[[Request], Awaitable[Response]]:
    """A GET endpoint around ``handler``: the session cookie, the flash message, the
    security headers, and every failure as a page."""

    async def endpoint(request: Request) -> Response:
        d = dashboard(request)
        d.feed.start()
        session = request.cookies.get(SESSION_COOKIE)
        request.state.session = session or new_session()
        flash_cookie = request.cookies.get(FLASH_COOKIE)
        request.state.flash = d.signer.read_flash(flash_cookie)
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                response = await handler(request, d)
        except Exception as exc:
            response = problem_page(request, exc)
        if session is None:
            response.set_cookie(
                SESSION_COOKIE,
                request.state.session,
                path=cookie_path(request),
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
        if flash_cookie is not None:
            response.delete_cookie(FLASH_COOKIE, path=cookie_path(request))
        response.headers.update(SECURITY_HEADERS)
        return response

    return endpoint


def action(handler: ActionHandler) -> Callable[[Request], Awaitable[Response]]:
    """A POST endpoint around ``handler``, which acts and returns (what it did, where to go
    next); see the module for what is refused."""

    async def endpoint(request: Request) -> Response:
        d = dashboard(request)
        request.state.session = request.cookies.get(SESSION_COOKIE) or ""
        try:
            if d.settings.read_only:
                raise refuse(403, "this dashboard is read-only: it takes no action")
            try:
                # Room for a full selection and the form's own fields.
                form = await request.form(max_fields=MAX_SELECTED + 20, max_files=0)
            except HTTPException:
                raise refuse(400, "the request did not carry a readable form") from None
            token = form.get(CSRF_FIELD)
            if not d.signer.csrf_ok(request.state.session, token if isinstance(token, str) else None):
                raise refuse(
                    403,
                    "the form did not come from this dashboard, or it expired: reload the page and try again",
                )
            async with asyncio.timeout(REQUEST_TIMEOUT):
                done, target = await handler(request, d, form)
            d.feed.poke()
        except Exception as exc:
            response: Response = problem_page(request, exc)
            response.headers.update(SECURITY_HEADERS)
            return response
        response = RedirectResponse(_safe_target(request, target), status_code=303)
        response.set_cookie(
            FLASH_COOKIE,
            d.signer.flash(done),
            path=cookie_path(request),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    return endpoint


def app_module(d: Dashboard) -> str:
    """The module the app's tasks are declared in, for the commands a new app is shown
    (``your.module`` before it declares any)."""
    for task in d.app.tasks.values():
        module = getattr(task.fn, "__module__", None)
        if isinstance(module, str) and module != "__main__":
            return module
    return "your.module"


def audit(request: Request, what: str, **fields: Any) -> None:
    """The ``ui.action`` log line of an action: who, from where, what, on which jobs. A list
    longer than :data:`AUDITED` (the jobs of a replay of a whole task, say) is told by its
    length and its first items: one action is one line of reasonable size."""
    audited(request)(what, **fields)


def audited(request: Request) -> Callable[..., None]:
    """What writes ``request``'s audit lines (as :func:`audit`), kept for work an action
    finishes after its request (a replay of a whole task)."""
    client = request.client.host if request.client is not None else None
    who = getattr(request.state, "who", "anonymous")

    def write(what: str, **fields: Any) -> None:
        _audit_line(who, client, what, fields)

    return write


def _audit_line(who: str, client: str | None, what: str, fields: dict[str, Any]) -> None:
    for name, value in list(fields.items()):
        if isinstance(value, list | tuple) and len(value) > AUDITED:
            fields[name] = list(value[:AUDITED])
            fields[f"{name}_count"] = len(value)
    # A logger made now, not the module's cached one: an audit line follows the logging
    # configuration of the moment it is written (actions are few: the cost does not show).
    get_logger("jsworker.ui").info("ui.action", who=who, client=client, action=what, **fields)


def _safe_target(request: Request, target: str) -> str:
    """``target`` when it is a path of this dashboard, else its overview: a form's ``next``
    never sends anyone elsewhere."""
    base = root(request)
    if target.startswith(base + "/") and not target.startswith("//") and "\\" not in target:
        return target
    return base + "/"


def back(form: FormData, fallback: str) -> str:
    """Where the form says to go after it (its ``next``), else ``fallback``."""
    given = form.get("next")
    return given if isinstance(given, str) and given else fallback


# -- form and query values -----------------------------------------------------------------


def field(form: Mapping[str, Any], name: str) -> str | None:
    """The form's or query's ``name`` as text, None when absent or empty."""
    value = form.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise refuse(400, f"{name} must be text")
    return value.strip() or None


def many(form: FormData, name: str, check: Callable[[str], Any]) -> list[Any]:
    """Every ``name`` value of ``form``, each passed through ``check`` (ConfigurationError
    for a bad one); at least one, at most :data:`MAX_SELECTED`."""
    values = [v for v in form.getlist(name) if isinstance(v, str) and v.strip()]
    if not values:
        raise refuse(400, "nothing was selected")
    if len(values) > MAX_SELECTED:
        raise refuse(400, f"at most {MAX_SELECTED} at once")
    return [check(v.strip()) for v in values]


def sequence(text: str) -> int:
    """A positive stream sequence, else ConfigurationError."""
    if not is_seq(text):
        raise ConfigurationError(f"not a sequence number: {text[:40]!r}")
    return int(text)


def counted(n: int, thing: str) -> str:
    """``n`` of ``thing`` as a sentence says it: "1 dead letter", "2,000 dead letters"."""
    return f"{n:,} {thing}" if n == 1 else f"{n:,} {thing}s"


def count(form: Mapping[str, Any], name: str, default: int, most: int) -> int:
    """A whole number from 1 to ``most`` given as ``name``, else ``default`` when absent."""
    text = field(form, name)
    if text is None:
        return default
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text[:9]) <= most:
        raise refuse(400, f"{name} must be a whole number from 1 to {most}")
    return int(text)
