"""The dashboard's charts (``/charts``) against a real server: drawn from the job events of
the window asked for, per queue or for the app; an app without job events is told how to get
them; a window not offered is refused."""

from __future__ import annotations

import asyncio
import re

import pytest

from jsworker import App, Reject
from jsworker.admin import Admin
from jsworker.testing import NatsServer
from jsworker.ui import create_app

from ..support import connected, wait_until_async
from .ui_support import client, no_traceback
from .workers import in_process_worker

pytestmark = pytest.mark.anyio


def _titles(page: str, chart: str) -> list[str]:
    """The hover titles of ``chart``'s points."""
    box = page.split(f'aria-label="{chart}"', 1)[1].split("</svg>", 1)[0]
    return re.findall(r"<circle [^>]*><title>([^<]+)</title>", box)


async def test_charts_show_what_the_job_events_counted(nats_server: NatsServer) -> None:
    app = App("charted", nats_server.url, events=True)
    app.queue("mail")

    @app.task
    async def work(n: int) -> None:
        # A run of a known least length: its run times in the table are at least that. No
        # event stands for the span; it is the measured thing.
        await asyncio.sleep(0.02)

    @app.task(queue="mail")
    async def bounce(n: int) -> None:
        raise Reject(f"bounced {n}")

    await app.provision()
    async with in_process_worker(app), Admin(app) as admin, client(create_app(app)) as http:
        for n in range(30):
            await work.adelay(n)
        for n in range(3):
            await bounce.adelay(n)
        await wait_until_async(
            lambda: admin.event_counts(("succeeded", "dead_lettered"), window=900, bucket=30),
            until=lambda c: sum(sum(b.values()) for b in c.counts.values()) == 33,
            timeout=20,
            message="every job's end among the events",
        )
        page = await http.get("/charts", params={"window": "15m"})
        no_traceback(page)
        assert page.status_code == 200
        text = page.text
        for chart in ("Throughput", "Failures", "Succeeded of those that ended"):
            assert f'aria-label="{chart}"' in text
        assert ">jobs/s</text>" in text and ">%</text>" in text
        # Every job started and 30 succeeded in the window: the points' rates say so.
        started = [t for t in _titles(text, "Throughput") if " started: " in t]
        assert started and all(t.endswith(" jobs/s") for t in started)
        assert any(not t.endswith(": 0 jobs/s") for t in started)
        failed = [t for t in _titles(text, "Failures") if "dead-lettered: " in t]
        assert any(not t.endswith(": 0 jobs/s") for t in failed)
        assert re.search(r"[1-9][0-9,]* job events read", text)
        # One queue's charts: mail only dead-letters, so none of its ended jobs succeeded.
        mail = (await http.get("/charts", params={"window": "1h", "queue": "mail"})).text
        shares = _titles(mail, "Succeeded of those that ended")
        assert shares and all(t.endswith("succeeded: 0 %") for t in shares)
        assert 'aria-current="page">1h<' in mail
        # Wait and run times per queue and task: every run counted, each run at least 20 ms.
        rows = {
            (cells[0], cells[1]): cells[2:]
            for cells in (
                re.findall(r"<td[^>]*>(?:<a [^>]*>)?([^<]*)", row)
                for row in text.split('id="timings"', 1)[1].split("</table>", 1)[0].split("<tr>")[2:]
            )
        }
        assert set(rows) == {("default", "work"), ("mail", "bounce")}
        work_row = rows[("default", "work")]
        assert work_row[0] == "30" and work_row[4] == "30"
        assert all(cell.endswith(" ms") for cell in work_row[5:8]), work_row
        assert all(float(cell.split()[0]) >= 20 for cell in work_row[5:8]), work_row
        assert rows[("mail", "bounce")][0] == "3" and rows[("mail", "bounce")][4] == "3"
        refused = await http.get("/charts", params={"window": "2y"})
        assert refused.status_code == 400 and "15m, 1h, 6h, 24h, 7d" in refused.text


async def test_an_app_without_job_events_is_told_how_to_get_charts(nats_server: NatsServer) -> None:
    app = App("plain", nats_server.url)

    @app.task
    async def work(n: int) -> None: ...

    async with client(create_app(app)) as http:
        page = await http.get("/charts")
        no_traceback(page)
        assert page.status_code == 200 and 'id="no-events"' in page.text and "events=True" in page.text


async def test_queue_depth_is_sampled_once_per_slot_and_charted(nats_server: NatsServer) -> None:
    """Two workers read the same queue's figures; the server keeps one sample of them per
    30-second slot, and the depth chart draws the jobs waiting and in flight."""
    app = App("deep", nats_server.url, events=True)
    gate = asyncio.Event()

    @app.task
    async def hold(n: int) -> None:
        await gate.wait()

    await app.provision()
    for n in range(10):
        await hold.adelay(n)
    await app.aclose()
    fast = {"concurrency": 1, "stats_interval": 0.1}
    async with in_process_worker(app, **fast), in_process_worker(app, **fast), Admin(app) as admin:
        depth = await wait_until_async(
            lambda: admin.queue_depth(window=900, bucket=30),
            until=lambda d: d.samples.get("default"),
            timeout=15,
            message="a depth sample of the queue",
        )
        (waiting, in_flight), *_ = depth.samples["default"].values()
        assert waiting + in_flight == 10
        # Each worker sampled every tenth of a second; one sample a slot was kept.
        stored = await _subject_count(nats_server.url, "JSW_DEEP_DEPTH", "jsw.deep.depth.default")
        assert 1 <= stored <= 2  # the test may span the turn of a slot
        async with client(create_app(app)) as http:
            text = (await http.get("/charts", params={"window": "15m"})).text
        waiting_points = [t for t in _titles(text, "Queue depth") if " waiting: " in t]
        assert any(t.endswith(f"waiting: {waiting} jobs") for t in waiting_points), waiting_points
        gate.set()


async def _subject_count(url: str, stream: str, subject: str) -> int:
    async with connected(url) as nc:
        info = await nc.jetstream().stream_info(stream, subjects_filter=subject)
        return sum((info.state.subjects or {}).values())
