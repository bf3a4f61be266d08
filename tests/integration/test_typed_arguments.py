"""Typed task arguments through a real server and worker: what the function gets, what is
refused before sending, and what a worker does with a body that does not fit."""

from __future__ import annotations

import dataclasses
import datetime
import json
import sys
from decimal import Decimal
from typing import Any

import nats
import pydantic
import pytest

from jsworker import App
from jsworker.testing import NatsServer
from jsworker.workflows import chain

from ..support import stream_messages_async, stream_state_async, wait_until_async
from .workers import APPS, in_process_worker

sys.path.insert(0, str(APPS))
import typed_results_app

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


class Mine:
    """A class of the app's own: no annotation jsworker converts."""


async def test_a_typed_result_is_kept_as_json_and_given_back_as_its_annotation(
    nats_server: NatsServer,
) -> None:
    """A task returning a Decimal, a dataclass (in a list), a date: kept (JSON refused them as
    they were, and dead-lettered the job after its work), and given back typed to a receipt, to
    a handle from the id alone, and to a chain's next step; a sync task's too. A return
    annotation of a class of the app's own leaves the value as returned."""
    app = App("typedres", nats_server.url, results=True, workflows=True)

    @app.task
    async def total(lines: list[Line]) -> Decimal:
        return sum((Decimal(line.qty) * Decimal("2.50") for line in lines), Decimal(0))

    @app.task
    async def split(amount: Decimal) -> list[Line]:
        return [Line(f"part-{amount}", 1)]

    @app.task
    def due(days: int) -> datetime.date:
        return datetime.date(2026, 12, 1) + datetime.timedelta(days=days)

    @app.task
    async def opaque() -> Mine:
        return "as returned"  # type: ignore[return-value]

    async with in_process_worker(app):
        job = await total.adelay([Line("book", 3)])
        assert await job.aresult(timeout=20) == Decimal("7.50")
        assert type(await app.job(job.id).aresult(timeout=20)) is Decimal
        assert await (await due.adelay(30)).aresult(timeout=20) == datetime.date(2026, 12, 31)
        assert await (await chain(total.s([Line("pen", 2)]), split.s()).aapply()).aresult(timeout=20) == [
            Line("part-5.00", 1)
        ]
        assert await (await opaque.adelay()).aresult(timeout=20) == "as returned"


async def test_a_task_processs_typed_result_is_kept_and_given_back(nats_server: NatsServer) -> None:
    app = typed_results_app.app
    app.servers = [nats_server.url]
    async with in_process_worker(app, task_processes=1):
        job = await typed_results_app.tax.adelay(Decimal("10.05"))
        assert await job.aresult(timeout=30) == Decimal("2.01")
