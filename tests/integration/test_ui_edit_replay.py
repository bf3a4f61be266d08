"""A dead letter replayed with its arguments corrected, from its page: the edited payload is
checked the way a worker decodes it before anything is stored, the job runs under its id from
attempt 1, and a dashboard that shows no payloads edits none."""

from __future__ import annotations

import html

import pytest

from jsworker import App
from jsworker._core.serializers import encode_call
from jsworker.admin import Admin
from jsworker.testing import NatsServer
from jsworker.ui import create_app

from ..support import wait_until_async
from .ui_support import client, no_traceback, post
from .workers import in_process_worker

pytestmark = pytest.mark.anyio


async def test_a_dead_letter_replayed_with_its_arguments_corrected(nats_server: NatsServer) -> None:
    app = App("edits", nats_server.url, max_retries=0)

    @app.task(store_result=True)
    async def divide(a: int, b: int) -> float:
        return a / b

    await app.provision()
    async with in_process_worker(app), Admin(app) as admin, client(create_app(app)) as http:
        job = await divide.adelay(6, 0)
        await wait_until_async(lambda: admin.count_dead_letters(), until=lambda n: n == 1, timeout=10)
        (letter,) = (await admin.dead_letters()).items
        page = await http.get(f"/dead-letters/{letter.seq}", params={"show": "payload"})
        no_traceback(page)
        assert f'action="/dead-letters/{letter.seq}/replay-edited"' in page.text
        assert "Edit the arguments, then replay" in page.text
        # Not arguments at all: refused, and the dead letter stays.
        bad = await post(http, f"/dead-letters/{letter.seq}/replay-edited", {"body": "{not json"})
        assert bad.status_code == 400 and "not a job&#39;s arguments" in bad.text
        assert await admin.count_dead_letters() == 1
        fixed = encode_call(app.serializer, (6, 2), {}).decode()
        done = await post(http, f"/dead-letters/{letter.seq}/replay-edited", {"body": fixed})
        assert done.headers["location"] == f"/jobs/{job.id}"
        told = html.unescape((await http.get(done.headers["location"])).text)
        assert f"Replayed dead letter #{letter.seq} with edited arguments: {job.id} runs again." in told
        assert await app.job(job.id).aresult(timeout=10) == 3.0
        assert await admin.count_dead_letters() == 0

    # A dashboard that shows no payloads has no form, and refuses the action.
    quiet = App("edits", nats_server.url)
    async with client(create_app(quiet, payloads=False)) as http:
        refused = await post(http, "/dead-letters/1/replay-edited", {"body": "{}"})
        assert refused.status_code == 403 and "edits none" in refused.text
    await app.aclose()
