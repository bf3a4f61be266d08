"""The dashboard is safe to expose: a password or a token (401 and nothing else without),
CSRF on every action (403 without), read-only (actions hidden and refused), payloads off;
and every failure a clear page with its status, never a traceback: bad input, unknown jobs
and dead letters, the streams deleted while it is open, NATS unreachable. Its own NATS
credential, the dashboard role: ``test_dashboard_role.py``."""

from __future__ import annotations

import base64
import contextlib

import httpx
import pytest
from nats.js.errors import NotFoundError

from jsworker import App
from jsworker.admin import Admin
from jsworker.testing import NatsServer
from jsworker.ui import create_app

from ..support import connected, free_port, wait_until_async
from .ui_support import client, csrf_of, no_traceback, post

pytestmark = pytest.mark.anyio


async def _app(url: str, name: str = "sec") -> App:
    app = App(name, url)

    @app.task(max_retries=0)
    async def work(secret: str) -> None: ...

    await app.provision()
    await work.adelay("payload-secret")
    await app.aclose()
    return app


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


async def test_a_password_is_asked_for_and_nothing_shown_without_it(nats_server: NatsServer) -> None:
    app = await _app(nats_server.url)
    async with client(create_app(app, auth="ops:s3cret")) as http:
        for headers in ({}, _basic("ops", "wrong"), _basic("other", "s3cret"), {"Authorization": "Basic !!"}):
            for path in ("/", "/static/app.css", "/live.json", "/jobs/x", "/nope"):
                refused = await http.get(path, headers=headers)
                assert (refused.status_code, refused.text) == (401, "unauthorized"), (path, headers)
                assert refused.headers["www-authenticate"].startswith("Basic")
            assert (await http.post("/queues/default/pause", headers=headers)).status_code == 401
        page = await http.get("/", headers=_basic("ops", "s3cret"))
        assert page.status_code == 200 and "Overview" in page.text


async def test_a_token_by_header_or_by_the_cookie_a_link_sets(nats_server: NatsServer) -> None:
    app = await _app(nats_server.url)
    async with client(create_app(app, token="t0ken")) as http:
        assert (await http.get("/")).status_code == 401
        assert (await http.get("/", headers={"Authorization": "Bearer nope"})).status_code == 401
        assert (await http.get("/", headers={"Authorization": "Bearer t0ken"})).status_code == 200
        assert (await http.get("/?token=nope")).status_code == 401
        link = await http.get("/jobs?state=failed&token=t0ken")
        # The token leaves the URL at once: the cookie carries it from here.
        assert link.status_code == 303 and link.headers["location"] == "/jobs?state=failed"
        assert "jsw_token=t0ken" in link.headers["set-cookie"] and "HttpOnly" in link.headers["set-cookie"]
        assert (await http.get("/jobs?state=failed")).status_code == 200
        http.cookies.clear()
        assert (await http.get("/jobs?state=failed")).status_code == 401
        # A link whose path begins with two slashes (or a slash and a backslash) stays on the
        # dashboard: redirected to as it is, the browser would take it for another site.
        for path in ("//evil.example/", "/\\evil.example/", "///evil.example/x"):
            link = await http.get(f"{str(http.base_url).rstrip('/')}{path}?token=t0ken")
            assert link.status_code == 303, path
            location = link.headers["location"]
            assert location.startswith("/") and location[1] not in "/\\", (path, location)


async def test_an_action_without_its_csrf_token_is_refused(nats_server: NatsServer) -> None:
    app = await _app(nats_server.url)
    async with client(create_app(app)) as http, Admin(app) as admin:
        page = await http.get("/queues/default")
        token = csrf_of(page.text)
        for data in ({}, {"csrf": "0" * 64}, {"csrf": token[:-1] + ("0" if token[-1] != "0" else "1")}):
            refused = await http.post("/queues/default/pause", data=data)
            assert refused.status_code == 403 and "did not come from this dashboard" in refused.text
        # The token of another session does not pass either.
        other = httpx.AsyncClient(transport=http._transport, base_url="http://dash")
        async with other:
            foreign = await other.post("/queues/default/pause", data={"csrf": token})
            assert foreign.status_code == 403
        assert not {q.queue: q.paused for q in await admin.queues()}["default"]
        # No action on a GET.
        assert (await http.get("/queues/default/pause")).status_code == 405
        assert (await http.post("/queues/default/pause", data={"csrf": token})).status_code == 303


async def test_read_only_hides_and_refuses_every_action(nats_server: NatsServer) -> None:
    app = await _app(nats_server.url)
    async with client(create_app(app, read_only=True)) as http, Admin(app) as admin:
        await wait_until_async(lambda: admin.count_dead_letters(), until=lambda n: n == 0)
        for path in ("/", "/queues/default", "/jobs", "/dead-letters", "/schedules", "/workers"):
            page = await http.get(path)
            assert page.status_code == 200 and "Read-only" in page.text
            assert 'method="post"' not in page.text and "Purge" not in page.text
        token = csrf_of((await http.get("/")).text)
        for path in (
            "/queues/default/pause",
            "/queues/default/purge",
            "/jobs/cancel",
            "/dead-letters/replay",
            "/jobs/x/replay",
            "/dead-letters/1/delete",
        ):
            refused = await http.post(path, data={"csrf": token, "confirm": "default", "id": "x"})
            assert refused.status_code == 403 and "read-only" in refused.text
        assert {q.queue: q.pending for q in await admin.queues()}["default"] == 1


async def test_payloads_off(nats_server: NatsServer) -> None:
    app = await _app(nats_server.url)
    async with client(create_app(app, payloads=False)) as http, Admin(app) as admin:
        (job,) = (await admin.jobs()).items
        page = await http.get(f"/jobs/{job.id}")
        assert page.status_code == 200 and "Show payload" not in page.text
        shown = await http.get(f"/jobs/{job.id}?show=payload")
        assert shown.status_code == 403 and "payload-secret" not in shown.text


async def test_bad_input_gets_a_clear_message_and_its_status(nats_server: NatsServer) -> None:
    app = await _app(nats_server.url)
    async with client(create_app(app)) as http:
        expected = {
            "/jobs/never-enqueued": (404, "no job never-enqueued is known"),
            "/jobs/bad.id": (400, "invalid job_id"),
            f"/job?id={'x' * 129}": (400, "search for 1 to 128 characters"),
            "/jobs/x?show=secrets": (400, "show what?"),
            "/jobs?state=done": (400, "unknown state"),
            "/jobs?after=soon": (400, "not a cursor"),
            # Past the largest stream sequence (2^64 - 1): no cursor of any listing.
            "/jobs?before=18446744073709551616": (400, "not a cursor"),
            "/jobs?state=failed&after=99999999999999999999999": (400, "not a cursor"),
            "/dead-letters?before=18446744073709551616": (400, "not a cursor"),
            "/queues/default?order=newest&before=18446744073709551616": (400, "not a cursor"),
            "/dead-letters/18446744073709551616": (400, "not a sequence"),
            "/jobs?state=scheduled&after=1.2": (400, "not a cursor of scheduled jobs"),
            "/jobs?limit=lots": (400, "limit must be"),
            "/jobs?limit=0": (400, "limit must be"),
            "/jobs?queue=a*b": (400, "invalid queue"),
            "/queues/nope": (404, "no queue &#39;nope&#39;"),
            "/dead-letters/999": (404, "no dead letter"),
            "/dead-letters/some-job": (400, "found by its number"),
            "/dead-letters?task=a.b": (400, "invalid task"),
            "/nope": (404, "Not Found"),
        }
        for path, (status, text) in expected.items():
            response = await http.get(path)
            no_traceback(response)
            assert response.status_code == status and text in response.text, (path, response.text[-600:])
        actions = {
            ("/jobs/cancel", ()): (400, "nothing was selected"),
            ("/jobs/cancel", (("id", "a b"),)): (400, "invalid job_id"),
            ("/jobs/replay", (("seq", "x"),)): (400, "not a sequence"),
            ("/jobs/replay", (("seq", "4242"),)): (404, "no dead letter"),
            ("/dead-letters/replay", (("all_of_task", "no.such"),)): (400, "invalid task"),
            ("/queues/nope/pause", ()): (400, "no consumer"),
            ("/queues/nope/purge", (("confirm", "nope"),)): (303, ""),
            ("/schedules/nope/trigger", ()): (404, "no schedule"),
            ("/schedules/nope/explode", ()): (404, "no such action"),
        }
        for (path, fields), (status, text) in actions.items():
            response = await post(http, path, dict(fields))
            no_traceback(response)
            assert response.status_code == status and text in response.text, (path, response.text[-600:])
        too_many = await post(http, "/jobs/cancel", {"id": [f"j{n}" for n in range(1001)]})
        assert too_many.status_code == 400 and "at most 1000" in too_many.text
        token = csrf_of((await http.get("/")).text)
        broken = await http.post(
            "/jobs/cancel",
            content=b'--xx\r\nContent-Disposition: form-data; name="csrf"\r\n\r\n' + token.encode(),
            headers={"Content-Type": "multipart/form-data; boundary=xx"},
        )
        no_traceback(broken)
        assert broken.status_code in (400, 403), broken.text


async def test_streams_deleted_while_the_dashboard_is_open(nats_server: NatsServer) -> None:
    app = await _app(nats_server.url)
    async with client(create_app(app)) as http, Admin(app) as admin:
        (job,) = (await admin.jobs()).items
        assert (await http.get(f"/jobs/{job.id}")).status_code == 200
        async with connected(nats_server.url) as nc:
            js = nc.jetstream()
            for stream in (app.namespace.stream, app.namespace.dlq_stream):
                with contextlib.suppress(NotFoundError):
                    await js.delete_stream(stream)
        for path in (
            "/",
            "/queues/default",
            "/jobs",
            "/jobs?state=running",
            "/dead-letters",
            "/workers",
            "/schedules",
        ):
            page = await http.get(path)
            no_traceback(page)
            assert page.status_code == 200, (path, page.text[-500:])
        gone = await http.get(f"/jobs/{job.id}")
        assert gone.status_code == 404 and "is known" in gone.text
        assert "not created yet" in (await http.get("/")).text
        for path, status in (("/queues/default/pause", 400), ("/jobs/replay", 404)):
            response = await post(http, path, {"seq": "1"})
            no_traceback(response)
            assert response.status_code == status, response.text


@pytest.mark.slow
async def test_nats_unreachable(nats_server: NatsServer) -> None:
    nowhere = App("gone", f"nats://127.0.0.1:{free_port()}", connect_timeout=1)
    async with client(create_app(nowhere)) as http:
        for path in ("/", "/jobs", "/dead-letters/1", "/live.json"):
            page = await http.get(path)
            no_traceback(page)
            if path == "/live.json":
                assert page.status_code == 200 and "cannot reach" in page.json()["error"]
            else:
                assert page.status_code == 503 and "cannot reach the NATS server" in page.text, page.text
        token = csrf_of((await http.get("/")).text)
        action = await http.post("/queues/default/pause", data={"csrf": token})
        no_traceback(action)
        assert action.status_code == 503 and "cannot reach" in action.text


@pytest.mark.slow
async def test_a_server_that_goes_away_while_the_dashboard_is_open() -> None:
    server = NatsServer().start()
    try:
        app = await _app(server.url, "away")
        async with client(create_app(app)) as http:
            assert (await http.get("/")).status_code == 200
            token = csrf_of((await http.get("/")).text)
            server.stop()
            page = await http.get("/")
            no_traceback(page)
            assert page.status_code in (503, 504) and "NATS" in page.text, page.text
            action = await http.post("/queues/default/pause", data={"csrf": token})
            no_traceback(action)
            assert action.status_code in (503, 504), action.text
    finally:
        server.stop()
