"""Mistakes a user makes when enqueueing are caught at once, with a message that names them."""

from __future__ import annotations

from typing import Any

import pytest

from jsworker import App
from jsworker._errors import ConfigurationError
from jsworker._runtime.settings import WorkerSettings
from jsworker._runtime.worker import Worker

pytestmark = pytest.mark.anyio


@pytest.fixture
def app() -> App:
    return App("usage", "nats://127.0.0.1:1")


def test_a_wrong_keyword_is_named_with_the_missing_one(app: App) -> None:
    @app.task
    def notify(user_id: int) -> None: ...

    with pytest.raises(TypeError) as info:
        notify.make_call((), {"user": 1}, None)
    assert "'user_id'" in str(info.value) and "'user'" in str(info.value)


@pytest.mark.parametrize("args", [6007, "abc", b"xy", {"a": 1}])
def test_args_must_be_a_sequence(app: App, args: Any) -> None:
    @app.task
    def f(*items: Any) -> None: ...

    with pytest.raises(TypeError, match="args must be a sequence"):
        f.make_call(args, None, None)


def test_kwargs_must_be_a_mapping(app: App) -> None:
    @app.task
    def f(**items: Any) -> None: ...

    with pytest.raises(TypeError, match="kwargs must be a mapping"):
        f.make_call((), [("a", 1)], None)  # type: ignore[arg-type]


async def test_a_queue_no_task_uses_is_refused_before_connecting(app: App) -> None:
    """-Q emials (a typo) would leave a durable consumer behind: refused, naming the queues."""

    @app.task(queue="emails")
    def send(to: str) -> None: ...

    worker = Worker(app, WorkerSettings(queues=["emials"]))
    with pytest.raises(ConfigurationError, match=r"emials.*its queues: emails"):
        await worker.run()  # the server at port 1 is never reached
