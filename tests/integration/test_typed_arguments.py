"""Typed task arguments through a real server and worker: what the function gets, what is
refused before sending, and what a worker does with a body that does not fit."""

from __future__ import annotations

import dataclasses
import datetime
import json
from decimal import Decimal
from typing import Any

import nats
import pydantic
import pytest

from jsworker import App
from jsworker.testing import NatsServer

from ..support import stream_messages_async, stream_state_async, wait_until_async
from .workers import in_process_worker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@dataclasses.dataclass
class Line:
    sku: str
    qty: int


class Customer(pydantic.BaseModel):
    name: str
    vip: bool = False


def _app(url: str, got: list[dict[str, Any]]) -> App:
    app = App("typed", url)

    @app.task(max_retries=0)
    async def charge(amount: Decimal, when: datetime.datetime, lines: list[Line], customer: Customer) -> None:
        got.append({"amount": amount, "when": when, "lines": lines, "customer": customer})

    return app


async def test_the_function_gets_the_annotated_types(nats_server: NatsServer) -> None:
    got: list[dict[str, Any]] = []
    app = _app(nats_server.url, got)
    sent = {
        "amount": Decimal("19.99"),
        "when": datetime.datetime(2026, 11, 23, 9, 0, tzinfo=datetime.UTC),
        "lines": [Line("book", 2)],
        "customer": Customer(name="Ada", vip=True),
    }
    async with in_process_worker(app):
        await app.tasks["charge"].adelay(**sent)
        await wait_until_async(lambda: len(got) == 1, timeout=20, message="the job to run")
    assert got == [sent]
    assert type(got[0]["amount"]) is Decimal and type(got[0]["lines"][0]) is Line


async def test_a_wrong_type_sends_nothing(nats_server: NatsServer) -> None:
    app = _app(nats_server.url, [])
    charge = app.tasks["charge"]
    await charge.adelay(Decimal(1), datetime.datetime.now(datetime.UTC), [], Customer(name="x"))
    before = (await stream_state_async(nats_server.url, "JSW_TYPED")).last_seq
    with pytest.raises(TypeError, match=r"argument 'lines'.*\$\[0\]\.qty"):
        wrong = [Line("a", "2")]  # type: ignore[arg-type]
        await charge.adelay(Decimal(1), datetime.datetime.now(datetime.UTC), wrong, Customer(name="x"))
    await app.aclose()
    assert (await stream_state_async(nats_server.url, "JSW_TYPED")).last_seq == before


async def test_a_body_that_does_not_fit_is_dead_lettered_naming_the_parameter(
    nats_server: NatsServer,
) -> None:
    got: list[dict[str, Any]] = []
    app = _app(nats_server.url, got)
    body = {"args": ["12.5", "yesterday", [], {"name": "x"}], "kwargs": {}}
    async with in_process_worker(app):
        nc = await nats.connect(nats_server.url)
        try:
            await nc.jetstream().publish(
                "jsw.typed.q.default.charge",
                json.dumps(body).encode(),
                headers={"Nats-Msg-Id": "hand-made", "Jsw-Task": "charge"},
            )
            await wait_until_async(
                lambda: stream_messages_async(nats_server.url, "JSW_TYPED_DLQ"),
                until=lambda n: n == 1,
                timeout=20,
                message="the dead letter",
            )
            letter = await nc.jetstream().get_msg("JSW_TYPED_DLQ", 1)
        finally:
            await nc.close()
    assert got == []
    assert letter.headers is not None
    reason = letter.headers["Jsw-Dlq-Reason"]
    assert "bad arguments" in reason and "argument 'when'" in reason, reason
