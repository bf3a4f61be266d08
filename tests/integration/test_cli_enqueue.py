"""``jsworker enqueue`` (one job from a shell) and ``jsworker queues limits`` against a real
server: what they print, store and refuse."""

from __future__ import annotations

import json
import sys

import anyio.to_thread
import pytest

from jsworker import App, JobState
from jsworker._cli.errors import EXIT_USAGE
from jsworker.testing import NatsServer

from ..support import wait_until_async
from .workers import APPS, cli, in_process_worker

pytestmark = pytest.mark.anyio


@pytest.fixture
def enqueue_app(nats_server: NatsServer) -> App:
    sys.path.insert(0, str(APPS))
    try:
        import enqueue_app
    finally:
        sys.path.remove(str(APPS))
    app: App = enqueue_app.app
    app.servers = [nats_server.url]
    return app


async def _cli(url: str, *args: str) -> tuple[int, str, str]:
    done = await anyio.to_thread.run_sync(lambda: cli(url, *args))
    return done.returncode, done.stdout.strip(), done.stderr.strip()


async def test_enqueue_stores_a_job_and_says_its_id(nats_server: NatsServer, enqueue_app: App) -> None:
    url = nats_server.url
    code, out, err = await _cli(url, "enqueue", "enqueue_app", "add", "[1, 2]")
    assert code == 0, err
    assert (await enqueue_app.astatus(out)).state is JobState.QUEUED
    code, out, err = await _cli(url, "enqueue", "enqueue_app", "add", "[1]", "--kwargs", '{"b": 5}',
                                "--job-id", "fixed-1", "--json")  # fmt: skip
    assert code == 0, err
    assert json.loads(out) == {
        "id": "fixed-1",
        "task": "add",
        "queue": "default",
        "duplicate": False,
        "due": None,
    }
    code, out, _ = await _cli(url, "enqueue", "enqueue_app", "add", "[1]", "--job-id", "fixed-1")
    assert (code, out) == (0, "fixed-1 (duplicate: a job with this id waits or runs)")
    code, out, err = await _cli(url, "enqueue", "enqueue_app", "add", "[3]", "--countdown", "600")
    assert code == 0 and ", due " in out, err
    assert (await enqueue_app.astatus(out.split(",")[0])).state is JobState.SCHEDULED
    async with in_process_worker(enqueue_app) as worker:
        await wait_until_async(lambda: worker.counts["succeeded"] == 2, timeout=10, message="both run")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["add", "[1,"], "ARGS_JSON: not JSON"),
        (["add", '{"a": 1}'], "ARGS_JSON: a JSON array"),
        (["add", "[1]", "--kwargs", "[]"], "--kwargs: a JSON object"),
        (["add", "[1]", "--job-id", "a.b"], "invalid job_id 'a.b'"),
        (["nosuch.task", "[]"], "nosuch.task"),
    ],
)
async def test_enqueue_refuses_bad_input_with_a_usage_error(
    nats_server: NatsServer, args: list[str], said: str
) -> None:
    code, _, err = await _cli(nats_server.url, "enqueue", "enqueue_app", *args)
    assert code == EXIT_USAGE and said in err, err


async def test_queues_limits_changes_them_through_a_running_worker(
    nats_server: NatsServer, enqueue_app: App
) -> None:
    url = nats_server.url
    async with in_process_worker(enqueue_app):
        code, out, err = await _cli(url, "queues", "limits", "enqueue_app", "paced", "--rate-limit", "none",
                                    "--max-running", "3")  # fmt: skip
        assert (code, out) == (0, "paced: set at run time: max_running 3, rate_limit none"), err
        back = ("--rate-limit", "declared", "--max-running", "declared")
        code, out, err = await _cli(url, "queues", "limits", "enqueue_app", "paced", *back)
        assert (code, out) == (0, "paced: the code's limits"), err
        code, _, err = await _cli(url, "queues", "limits", "enqueue_app", "paced", "--max-running", "lots")
        assert code == EXIT_USAGE and "max_running is a whole number" in err, err
