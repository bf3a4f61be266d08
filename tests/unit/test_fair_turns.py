"""Fair queues without a server: whose turn comes next, where a producer puts a fair queue's
jobs, and the names involved (the real-server proof is tests/integration/test_fair.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jsworker import App
from jsworker._errors import ConfigurationError
from jsworker._limits.fair import Turns
from jsworker._limits.spec import partition_token
from jsworker._wire.headers import PARTITION


def test_partitions_take_turns_in_the_order_they_were_first_seen() -> None:
    turns = Turns()
    for seq in range(1, 6):
        turns.add("big", seq, f"s{seq}")
    turns.add("small", 6, "s6")
    turns.add("small", 7, "s7")
    assert (turns.jobs, turns.partitions) == (7, 2)
    taken = turns.take(4)
    assert (turns.jobs, turns.partitions) == (3, 1)
    assert [(p, seq) for p, seq, _ in taken] == [("big", 1), ("small", 6), ("big", 2), ("small", 7)]
    turns.add("late", 8, "s8")  # joins the end of the turn
    assert [(p, seq) for p, seq, _ in turns.take(10)] == [("big", 3), ("late", 8), ("big", 4), ("big", 5)]
    assert turns.take(1) == []


def test_a_job_put_back_is_first_of_its_line_again() -> None:
    turns = Turns()
    turns.add("a", 1, "s1")
    turns.add("a", 2, "s2")
    turns.add("b", 3, "s3")
    (first,) = turns.take(1)
    turns.put_back(*first)
    assert [seq for _, seq, _ in turns.take(3)] == [3, 1, 2]  # a's turn as it was
    turns.put_back("gone", 9, "s9")  # a partition whose line had emptied comes back first
    assert [seq for _, seq, _ in turns.take(1)] == [9]


def _fair_app() -> App:
    app = App("shop")
    app.queue("emails", fair=True)
    return app


def test_a_fair_queues_job_goes_to_its_intake_with_its_partition() -> None:
    app = _fair_app()

    @app.task(queue="emails", partition_key=lambda account, **_: account)
    def send(account: str, body: str) -> None: ...

    @app.task(queue="emails")
    def tidy() -> None: ...

    call = send.make_call(("acme",), {"body": "hi"}, None)
    msg = app.producer.message(send, call)
    assert msg.subject == f"jsw.shop.in.emails.send.{call.job_id}"
    assert msg.headers[PARTITION] == partition_token("acme")
    assert app.namespace.moved_subject(msg.subject) == f"jsw.shop.q.emails.send.{call.job_id}"
    assert app.producer.message(tidy, tidy.make_call((), None, None)).headers[PARTITION] == partition_token(
        "tidy"
    )
    # A delayed job joins the queue itself when due.
    later = send.make_call(("acme", "hi"), None, None, due=datetime.now(UTC) + timedelta(hours=1))
    assert ".in." not in app.producer.message(send, later).subject


def test_what_a_fair_queue_refuses_is_said_before_anything_is_sent() -> None:
    app = _fair_app()

    @app.task(queue="emails", partition_key=lambda account: account["id"])
    def send(account: dict[str, str]) -> None: ...

    @app.task(queue="emails", unique=True)
    def once() -> None: ...

    with pytest.raises(ValueError, match=r"task send: partition_key raised KeyError"):
        app.producer.message(send, send.make_call(({"name": "acme"},), None, None))
    with pytest.raises(ConfigurationError, match="unique jobs cannot go to fair queue 'emails'"):
        app.producer.message(once, once.make_call((), None, None))
    with pytest.raises(ConfigurationError, match="fair must be True or False"):
        app.queue("other", fair="yes")  # type: ignore[arg-type]


def test_a_moved_subject_is_only_made_from_an_intake_subject() -> None:
    with pytest.raises(ValueError, match="not an intake subject"):
        _fair_app().namespace.moved_subject("jsw.shop.q.emails.send.1")
