"""The dashboard at scale: every page's response time and the dashboard process's memory with
1,000,000 waiting jobs and 100,000 dead letters.

    .venv/bin/python bench/ui.py                          # 1,000,000 jobs, 100,000 dead letters
    .venv/bin/python bench/ui.py --jobs 20000 --letters 2000   # a quick look
    .venv/bin/python bench/ui.py --store /tmp/uibench     # keep the server's store; a rerun skips the fill

Starts its own nats-server (free loopback port; a temporary store unless ``--store``), fills
it with raw nats-py (``publish_async`` in windows of 1,000, messages shaped as jsworker sends
them: a subject per job ending in its id, its headers; dead letters as a worker writes them,
traceback included), with a queue consumer that has handed out nothing, so every job waits.
Then a fresh process builds the dashboard (``jsworker.ui.create_app``) and requests each page
through its ASGI interface (httpx's ``ASGITransport``): the first request (cold) and the
median and worst of the next five. It reports the process's resident memory after the pages
(``VmRSS``) and its peak (``VmHWM``). Targets: every page under 1 s, the process under 200 MB.
Exit code 1 when one is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import nats

from jsworker import App
from jsworker._deadletters.format import dead_letter_message
from jsworker._server import NatsServer

APP = "benchui"
WINDOW = 1000
REPEAT = 5
PAGE_LIMIT_S = 1.0
RSS_LIMIT_MB = 200.0


def bench_app(url: str) -> App:
    """The app the pages show: one task on the default queue."""
    app = App(APP, url)

    @app.task
    async def work(n: int) -> None: ...

    return app


# -- the fill -------------------------------------------------------------------------------


async def fill(url: str, jobs: int, letters: int) -> dict[str, int]:
    """Provision the app and publish what is missing of ``jobs`` waiting jobs and ``letters``
    dead letters; the counts stored afterwards."""
    app = bench_app(url)
    await app.provision()  # streams and the queue's consumer, which hands out nothing here
    await app.aclose()
    ns = app.namespace
    nc = await nats.connect(url, connect_timeout=5)
    js = nc.jetstream(publish_async_max_pending=WINDOW)
    try:
        have_jobs = (await js.stream_info(ns.stream)).state.messages
        have_letters = (await js.stream_info(ns.dlq_stream)).state.messages
        started = time.monotonic()
        for i in range(have_jobs, jobs):
            job_id = uuid.uuid4().hex
            headers = {
                "Nats-Msg-Id": job_id,
                "Jsw-Task": "work",
                "Jsw-Enqueued-At": str(time.time_ns()),
                "Content-Type": "application/json",
            }
            body = json.dumps({"args": [i], "kwargs": {}}).encode()
            await js.publish_async(ns.job_subject("default", "work", job_id), body, headers=headers)
            if i % 100_000 == 0 and i > have_jobs:
                _progress(f"jobs: {i:,} ({i / (time.monotonic() - started):,.0f}/s)")
        await js.publish_async_completed()
        try:
            raise ValueError("the card was declined")
        except ValueError as exc:
            error = exc
        for i in range(have_letters, letters):
            job_id = uuid.uuid4().hex
            msg = dead_letter_message(
                ns,
                subject=ns.job_subject("default", "work", job_id),
                body=json.dumps({"args": [i], "kwargs": {}}).encode(),
                headers={"Nats-Msg-Id": job_id, "Jsw-Task": "work", "Content-Type": "application/json"},
                job_id=job_id,
                task="work",
                queue="default",
                attempt=3,
                reason="ValueError: the card was declined (attempts exhausted: 3 of 3)",
                error=error,
            )
            await js.publish_async(msg.subject, msg.body, headers=dict(msg.headers))
        await js.publish_async_completed()
        return {
            "jobs": (await js.stream_info(ns.stream)).state.messages,
            "letters": (await js.stream_info(ns.dlq_stream)).state.messages,
            "fill_s": round(time.monotonic() - started),
        }
    finally:
        await nc.close()


def _progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- the pages, in a process of their own ---------------------------------------------------


async def measure(url: str) -> dict[str, Any]:
    """Every page's times through the dashboard's ASGI app, and this process's memory."""
    import httpx

    from jsworker.admin import Admin
    from jsworker.ui import create_app

    app = bench_app(url)
    async with Admin(app) as admin:
        half_jobs = (await admin.health()).messages // 2
        half_letters = await admin.count_dead_letters() // 2
        middle = (await admin.jobs(limit=1, after=half_jobs)).items[0]
        letter = (await admin.dead_letters(limit=1, after=half_letters)).items[0]
    pages = {
        "overview": "/",
        "live figures": "/live.json",
        "queue, oldest first": "/queues/default",
        "queue, newest first": "/queues/default?order=newest",
        "queue, page in the middle": f"/queues/default?after={half_jobs}",
        "queue, page before the middle": f"/queues/default?before={half_jobs}",
        "jobs queued, newest first": "/jobs?state=queued&order=newest",
        "jobs queued of a task": "/jobs?state=queued&task=work",
        "jobs running": "/jobs?state=running",
        "jobs retrying": "/jobs?state=retrying",
        "jobs scheduled": "/jobs?state=scheduled",
        "jobs failed": "/jobs?state=failed",
        "jobs failed, newest first": "/jobs?state=failed&order=newest",
        "job": f"/jobs/{middle.id}",
        "job with its payload": f"/jobs/{middle.id}?show=payload",
        "dead letters": "/dead-letters",
        "dead letters, newest first": "/dead-letters?order=newest",
        "dead letters, page in the middle": f"/dead-letters?after={half_letters}",
        "dead letters of a task": "/dead-letters?task=work",
        "dead letter": f"/dead-letters/{letter.seq}",
        "dead letter with its payload": f"/dead-letters/{letter.seq}?show=payload",
        "purge confirmation": "/dead-letters/purge",
        # Text in no job: the whole scan (the newest 2,000 waiting jobs and dead letters).
        "search by text, no match": "/job?id=no-such-text",
        "search by part of an id": f"/job?id={middle.id[:12]}",
        "schedules": "/schedules",
        "workers": "/workers",
    }
    ui = create_app(app)
    results = []
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=ui), base_url="http://b") as http:
            for name, path in pages.items():
                times = []
                for _ in range(REPEAT + 1):
                    started = time.perf_counter()
                    response = await http.get(path)
                    times.append(time.perf_counter() - started)
                    if response.status_code != 200:
                        raise RuntimeError(f"{path}: {response.status_code} {response.text[-300:]}")
                results.append(
                    {
                        "page": name,
                        "path": path,
                        "first_s": round(times[0], 3),
                        "median_s": round(statistics.median(times[1:]), 3),
                        "max_s": round(max(times[1:]), 3),
                    }
                )
    finally:
        await ui.state.dashboard.aclose()
    memory = _memory()
    return {"pages": results, **memory}


def _memory() -> dict[str, float]:
    found: dict[str, float] = {}
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                found[line.split(":")[0].lower() + "_mb"] = round(int(line.split()[1]) / 1024, 1)
    return found


# -- the report -----------------------------------------------------------------------------


def report(filled: dict[str, int], measured: dict[str, Any]) -> bool:
    """Print the table and a JSON line; whether every target was met."""
    print(f"\n{filled['jobs']:,} waiting jobs, {filled['letters']:,} dead letters\n")
    print("| page | first | median | worst | |")
    print("|---|---|---|---|---|")
    ok = True
    for row in measured["pages"]:
        passed = max(row["first_s"], row["max_s"]) < PAGE_LIMIT_S
        ok &= passed
        print(
            f"| {row['page']} (`{row['path'].split('?')[0][:30]}`) | {row['first_s']:.3f} s "
            f"| {row['median_s']:.3f} s | {row['max_s']:.3f} s | {'PASS' if passed else 'MISS'} |"
        )
    rss_ok = measured["vmhwm_mb"] < RSS_LIMIT_MB
    ok &= rss_ok
    print(
        f"\ndashboard process: {measured['vmrss_mb']} MB resident after the pages, peak "
        f"{measured['vmhwm_mb']} MB ({'PASS' if rss_ok else 'MISS'}: under {RSS_LIMIT_MB:.0f} MB)"
    )
    print(json.dumps({"figure": "ui.pages", **filled, **measured}))
    return ok


def main() -> int:
    """Fill a server, then measure the pages in a process of their own."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--letters", type=int, default=100_000)
    parser.add_argument("--store", type=Path, default=None, help="keep the server's store here")
    parser.add_argument("--measure", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(asyncio.run(measure(args.measure))))
        return 0
    with NatsServer(store_dir=args.store) as server:
        filled = asyncio.run(fill(server.url, args.jobs, args.letters))
        _progress(f"filled: {filled}; measuring the pages")
        child = subprocess.run(
            [sys.executable, __file__, "--measure", server.url], capture_output=True, text=True, timeout=1800
        )
        if child.returncode != 0:
            _progress(child.stderr)
            return 1
        measured = json.loads(child.stdout.strip().splitlines()[-1])
    return 0 if report(filled, measured) else 1


if __name__ == "__main__":
    sys.exit(main())
