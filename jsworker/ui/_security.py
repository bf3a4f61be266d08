"""Who may see the dashboard, and proof that an action came from its own pages.

* **Authentication** (:class:`Gate`, an ASGI middleware in front of every route, static files
  included): HTTP Basic against one ``user:password``, or a bearer token, or both (either
  passes). The token also comes as a cookie, set once from ``?token=`` in a link (the URL is
  then redirected without it, so it stays out of history and access logs). Both are compared
  in constant time. Anything else gets ``401`` and a one-word body. No credential configured:
  everyone who can reach the port gets in (it binds 127.0.0.1 by default).
* **CSRF**: a random session cookie (``HttpOnly``, ``SameSite=Strict``) and, in every form, an
  HMAC of it under a key that lives only in this process (:class:`Signer`). A POST passes only
  with both, matching; a forged cross-site form has neither, and a cookie set by a neighbour
  site cannot be paired with a token without the key.
* **Flash messages** travel from an action to the page it redirects to in a signed cookie, so
  no link can make the dashboard claim something was done.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SESSION_COOKIE = "jsw_session"
TOKEN_COOKIE = "jsw_token"
FLASH_COOKIE = "jsw_flash"
#: The form field that carries the CSRF token.
CSRF_FIELD = "csrf"


def parse_auth(auth: str | tuple[str, str] | None) -> tuple[str, str] | None:
    """``"user:password"`` (or a pair) as a pair; ValueError when it is not one."""
    if auth is None:
        return None
    if isinstance(auth, tuple):
        user, password = auth
    else:
        user, sep, password = auth.partition(":")
        if not sep:
            raise ValueError("auth must be user:password")
    if not user or not password:
        raise ValueError("auth needs a user name and a password")
    return user, password


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a request must present: a Basic user and password, a token, either, or nothing."""

    basic: tuple[str, str] | None = None
    token: str | None = None

    @property
    def required(self) -> bool:
        """Whether any credential is configured."""
        return self.basic is not None or self.token is not None

    def who(self, request: Request) -> str | None:
        """Who ``request`` comes from (for the audit log), or None when it proves nothing
        configured. Every configured check runs, whatever an earlier one found: the time a
        refusal takes says nothing about which part was wrong."""
        if not self.required:
            return "anonymous"
        found: str | None = None
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        if self.basic is not None:
            user, password = _basic(value) if scheme.lower() == "basic" else ("", "")
            ok_user = hmac.compare_digest(user.encode(), self.basic[0].encode())
            ok_password = hmac.compare_digest(password.encode(), self.basic[1].encode())
            if ok_user and ok_password:
                found = f"user:{user}"
        if self.token is not None:
            given = value if scheme.lower() == "bearer" else request.cookies.get(TOKEN_COOKIE, "")
            if hmac.compare_digest(given.encode(), self.token.encode()) and found is None:
                found = "token"
        return found


def _basic(value: str) -> tuple[str, str]:
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return "", ""
    user, _, password = decoded.partition(":")
    return user, password


class Gate:
    """The ASGI middleware that lets only authenticated requests through (see the module);
    who it is lands in ``request.state.who``."""

    def __init__(self, app: ASGIApp, credentials: Credentials) -> None:
        self.app = app
        self.credentials = credentials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        given = request.query_params.get("token")
        if given is not None and self.credentials.token is not None and request.method == "GET":
            await self._token_link(request, given)(scope, receive, send)
            return
        who = self.credentials.who(request)
        if who is None:
            await _refused(self.credentials)(scope, receive, send)
            return
        scope.setdefault("state", {})["who"] = who
        await self.app(scope, receive, send)

    def _token_link(self, request: Request, given: str) -> Response:
        """A link carrying ``?token=``: the cookie set from it, and the same URL without it."""
        assert self.credentials.token is not None
        if not hmac.compare_digest(given.encode(), self.credentials.token.encode()):
            return _refused(self.credentials)
        rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
        # One leading slash: a path that begins "//" (or "/\\", which browsers read alike)
        # would send the browser to another site with the redirect.
        path = "/" + request.url.path.lstrip("/\\")
        target = path + (f"?{urlencode(rest)}" if rest else "")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            TOKEN_COOKIE,
            given,
            path=cookie_path(request),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response


def _refused(credentials: Credentials) -> Response:
    # Nothing but the status: no page, no hint which part was wrong.
    headers = {"WWW-Authenticate": 'Basic realm="jsworker", charset="UTF-8"'} if credentials.basic else {}
    return PlainTextResponse("unauthorized", status_code=401, headers=headers)


def cookie_path(request: Request) -> str:
    """The path the dashboard's cookies are scoped to: where it is mounted."""
    root = str(request.scope.get("root_path") or "")
    return root + "/" if not root.endswith("/") else root


class Signer:
    """HMACs under a key made when the process starts (see the module)."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    def sign(self, purpose: str, value: str) -> str:
        """A hex HMAC of ``value`` for ``purpose`` (the purposes never share a tag)."""
        return hmac.new(self._key, f"{purpose}\0{value}".encode(), hashlib.sha256).hexdigest()

    def check(self, purpose: str, value: str, tag: str) -> bool:
        """Whether ``tag`` is :meth:`sign` of ``value`` for ``purpose`` (constant time)."""
        return hmac.compare_digest(self.sign(purpose, value).encode(), tag.encode())

    def csrf_token(self, session: str) -> str:
        """The token a form of session ``session`` carries."""
        return self.sign("csrf", session)

    def csrf_ok(self, session: str | None, token: str | None) -> bool:
        """Whether a POST with session cookie ``session`` and form token ``token`` passes."""
        if not session or not token:
            return False
        return self.check("csrf", session, token)

    def flash(self, text: str) -> str:
        """``text`` as a flash cookie's value."""
        encoded = base64.urlsafe_b64encode(text.encode()).decode()
        return f"{encoded}.{self.sign('flash', encoded)}"

    def read_flash(self, value: str | None) -> str | None:
        """The text of a flash cookie's value, None when there is none or it is not ours."""
        if not value or "." not in value:
            return None
        encoded, _, tag = value.rpartition(".")
        if not self.check("flash", encoded, tag):
            return None
        try:
            return base64.urlsafe_b64decode(encoded.encode()).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None


def new_session() -> str:
    """A fresh session id (the CSRF token is made from it)."""
    return secrets.token_urlsafe(24)
