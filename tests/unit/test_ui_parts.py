"""The dashboard's pieces that need no server: credentials, CSRF and flash signatures, paging
both ways, payloads made readable, the charts' rates."""

from __future__ import annotations

import base64

import pytest
from starlette.requests import Request

from jsworker._core.paging import Page
from jsworker.ui._feed import _Series
from jsworker.ui._paging import both_ways
from jsworker.ui._payloads import SHOWN, readable
from jsworker.ui._security import TOKEN_COOKIE, Credentials, Signer, parse_auth

pytestmark = pytest.mark.anyio


def _request(headers: dict[str, str] | None = None, cookies: str = "") -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    if cookies:
        raw.append((b"cookie", cookies.encode()))
    return Request({"type": "http", "method": "GET", "path": "/", "headers": raw, "query_string": b""})


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_auth_is_a_user_and_a_password() -> None:
    assert parse_auth("ops:pa:ss") == ("ops", "pa:ss")
    assert parse_auth(("a", "b")) == ("a", "b") and parse_auth(None) is None
    for bad in ("nopassword", ":pw", "user:"):
        with pytest.raises(ValueError):
            parse_auth(bad)


def test_who_a_request_comes_from() -> None:
    assert Credentials().who(_request()) == "anonymous"
    both = Credentials(("ops", "pw"), "tok")
    assert both.who(_request(_basic("ops", "pw"))) == "user:ops"
    assert both.who(_request({"Authorization": "Bearer tok"})) == "token"
    assert both.who(_request(cookies=f"{TOKEN_COOKIE}=tok")) == "token"
    for refused in (
        _request(),
        _request(_basic("ops", "wrong")),
        _request(_basic("other", "pw")),
        _request({"Authorization": "Basic %%%"}),
        _request({"Authorization": "Bearer tok2"}),
        _request(cookies=f"{TOKEN_COOKIE}=nope"),
    ):
        assert both.who(refused) is None
    assert Credentials(token="tok").who(_request(_basic("ops", "pw"))) is None


def test_csrf_tokens_and_flash_messages_are_this_process_own() -> None:
    signer, other = Signer(), Signer()
    token = signer.csrf_token("session-1")
    assert signer.csrf_ok("session-1", token)
    assert not signer.csrf_ok("session-2", token)
    assert not other.csrf_ok("session-1", token)
    assert not signer.csrf_ok(None, token) and not signer.csrf_ok("session-1", None)
    cookie = signer.flash("Replayed 3 dead letters.")
    assert signer.read_flash(cookie) == "Replayed 3 dead letters."
    assert other.read_flash(cookie) is None
    assert signer.read_flash(None) is None and signer.read_flash("garbage") is None
    forged = base64.urlsafe_b64encode(b"Purged everything").decode() + "." + cookie.rpartition(".")[2]
    assert signer.read_flash(forged) is None


async def test_paging_both_ways_over_a_listing_that_pages_one_way() -> None:
    items = list(range(1, 11))  # sequences 1..10

    async def fetch(cursor: str | None, newest: bool, limit: int) -> Page[int]:
        if newest:
            below = int(cursor) if cursor else 11
            found = [i for i in reversed(items) if i < below][:limit]
        else:
            above = int(cursor) if cursor else 0
            found = [i for i in items if i > above][:limit]
        return Page(tuple(found), str(found[-1]) if len(found) == limit else None)

    first = await both_ways(fetch, str, newest=False, limit=4, after=None, before=None)
    assert (first.items, first.before, first.after, first.moved) == ((1, 2, 3, 4), None, "4", False)
    second = await both_ways(fetch, str, newest=False, limit=4, after="4", before=None)
    assert (second.items, second.before, second.after) == ((5, 6, 7, 8), "5", "8")
    last = await both_ways(fetch, str, newest=False, limit=4, after="8", before=None)
    assert (last.items, last.before, last.after) == ((9, 10), "9", None)
    back = await both_ways(fetch, str, newest=False, limit=4, after=None, before="5")
    assert (back.items, back.before, back.after) == ((1, 2, 3, 4), None, "4")
    newest = await both_ways(fetch, str, newest=True, limit=4, after=None, before=None)
    assert (newest.items, newest.after) == ((10, 9, 8, 7), "7")
    newer = await both_ways(fetch, str, newest=True, limit=4, after=None, before="6")
    assert (newer.items, newer.before, newer.after) == ((10, 9, 8, 7), None, "7")


def test_payloads_are_made_readable_never_decoded_by_a_serializer() -> None:
    shown = readable(b'{"args": [1, "\xc3\xa9"], "kwargs": {}}', "application/json")
    assert shown.kind == "json" and '"é"' in shown.text and not shown.cut
    assert readable(b"plain words", "text/plain").kind == "text"
    pickled = readable(b"\x80\x04\x95\x00\x00cos\nsystem\n", "application/x-pickle")
    assert pickled.kind == "hex" and "cos" in pickled.text
    big = readable(b'"' + b"x" * (SHOWN + 10) + b'"', "application/json")
    assert big.cut and big.size == SHOWN + 12 and len(big.text) <= SHOWN


def test_chart_rates_from_counters() -> None:
    series = _Series()
    series.add(100.0, 10, 0)
    series.add(102.0, 30, 1)
    series.add(104.0, 5, 0)  # the consumer was made again, letters replayed: no negative rate
    assert series.as_dict() == {"started": [10.0, 0.0], "failed": [0.5, 0.0]}
