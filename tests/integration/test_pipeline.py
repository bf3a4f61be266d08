"""The job pipeline: its map in docs/project-layout.md matches what the code builds, and a new
per-job concern plugs in as one interceptor class, with no change to the worker."""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from jsworker import App, JobContext, Middleware, Retry
from jsworker._runtime.execution import JobRun
from jsworker._runtime.interceptors import ORDER
from jsworker._runtime.outcomes import Outcome, Settlement
from jsworker._runtime.pipeline import STAGES, CallNext, Interceptor

from ..support import wait_until_async
from .workers import APPS, in_process_worker

sys.path.insert(0, str(APPS))
import pipeline_app

if TYPE_CHECKING:
    from jsworker.testing import NatsServer

pytestmark = pytest.mark.anyio

LAYOUT = Path(__file__).parents[2] / "docs" / "project-layout.md"


def _section(name: str) -> str:
    text = LAYOUT.read_text(encoding="utf-8")
    found = re.search(rf"<!-- {name} -->\n(.*?)<!-- end {name} -->", text, re.S)
    assert found is not None, f"docs/project-layout.md has no {name} section"
    return found.group(1)


def readme_stages() -> list[str]:
    return re.findall(r"^\d+\. `(\w+)`", _section("pipeline stages"), re.M)


def readme_interceptors() -> list[tuple[str, set[str]]]:
    """(name, hooks) of each row of the documentation's interceptor table."""
    rows = []
    for line in _section("pipeline interceptors").splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        hooks = set(re.findall(r"\b(admit|around_run|before_final|after_settled)\b", cells[2]))
        rows.append((cells[0].strip("`"), hooks))
    return rows


def test_the_readme_lists_the_stages_and_interceptors_in_order() -> None:
    assert readme_stages() == list(STAGES)
    assert [name for name, _ in readme_interceptors()] == list(ORDER)


async def test_a_worker_with_every_feature_on_builds_the_listed_pipeline(nats_server: NatsServer) -> None:
    pipeline_app.app.servers = [nats_server.url]
    async with in_process_worker(pipeline_app.app) as worker:
        built = worker.pipeline.interceptors
    assert [i.name for i in built] == list(ORDER)
    listed = dict(readme_interceptors())
    for interceptor in built:
        # The documentation's hooks column names every hook the code gathers (and, for metrics, the
        # debug-only admit besides).
        assert interceptor.hooks() <= listed[interceptor.name], interceptor.name
        assert listed[interceptor.name] - interceptor.hooks() <= {"admit"}, interceptor.name


class AttemptCounter(Interceptor):
    """A per-job concern written here: how often each task was admitted, run and settled, and
    how each delivery ended (with its attempt)."""

    name = "attempt-counter"

    def __init__(self) -> None:
        self.admitted: Counter[str] = Counter()
        self.ran: Counter[str] = Counter()
        self.settled: list[tuple[str, int, str]] = []
        self.trail: list[str] = []

    def admit(self, job: JobRun) -> None:
        self.admitted[job.task_name] += 1

    async def around_run(self, job: JobRun, call_next: CallNext) -> Outcome:
        self.ran[job.task_name] += 1
        self.trail.append("counter")
        return await call_next()

    async def after_settled(self, job: JobRun, settlement: Settlement) -> None:
        self.settled.append((job.task_name, job.attempt, settlement.outcome.kind.value))


class Inner(Middleware):
    def __init__(self, trail: list[str]) -> None:
        self.trail = trail

    async def around_run(self, job: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        self.trail.append("middleware")
        return await call_next()


async def test_a_new_concern_plugs_in_as_one_class(nats_server: NatsServer) -> None:
    counter = AttemptCounter()
    app = App("pipeplug", nats_server.url, middleware=[Inner(counter.trail)])
    tries: Counter[str] = Counter()

    @app.task
    async def flaky() -> None:
        tries["flaky"] += 1
        if tries["flaky"] == 1:
            raise Retry(delay=0)

    @app.task
    async def fine() -> None: ...

    async with in_process_worker(app, interceptors=[counter]) as worker:
        assert [i.name for i in worker.pipeline.interceptors][-2:] == ["attempt-counter", "middleware"]
        await flaky.adelay()
        await fine.adelay()
        await wait_until_async(lambda: len(counter.settled) == 3, timeout=30, message="three settlements")
    assert sorted(counter.settled) == [
        ("fine", 1, "succeeded"),
        ("flaky", 1, "retry"),
        ("flaky", 2, "succeeded"),
    ]
    assert counter.admitted == counter.ran == Counter({"flaky": 2, "fine": 1})
    # Given to the worker, it comes after the features and before the app's middleware.
    assert counter.trail == ["counter", "middleware"] * 3
