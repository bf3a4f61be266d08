"""Delivered messages: parsing the ack reply subject and the bytes of the ack protocol verbs."""

from __future__ import annotations

import pytest

from jsworker._errors import Retry
from jsworker._runtime.outcomes import Outcome, OutcomeKind, RetryPolicy, decide
from jsworker.jetstream.delivery import Delivery, _parse_reply

pytestmark = pytest.mark.anyio

REPLY = "$JS.ACK.S.C.1.5.5.1795325908066727278.0"


class FakeNC:
    """Records what would be published; asserts are about jsworker's bytes, not the server."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    async def publish(self, subject: str, data: bytes) -> None:
        self.sent.append((subject, data))

    def put(self, subject: str, data: bytes) -> None:
        self.sent.append((subject, data))


def _delivery(reply: str = REPLY, headers: dict[str, str] | None = None) -> tuple[Delivery, FakeNC]:
    nc = FakeNC()
    return Delivery(nc, "jsw.a.q.default.t", reply, b"{}", headers), nc


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (REPLY, (1, 5)),
        ("$JS.ACK.JSW_APP.default.3.42.40.1795325908066727278.7", (3, 42)),
        # 2.10+ with domain and account hash, plus a trailing random token: 12 tokens.
        ("$JS.ACK.hub.ACCHASH123.JSW_APP.default.4.99.12.1795325908066727278.0.xyz123", (4, 99)),
        # the 11-token form without the random token.
        ("$JS.ACK._.ACCHASH123.JSW_APP.default.2.77.12.1795325908066727278.0", (2, 77)),
    ],
)
def test_parse_reply_reads_delivery_count_and_stream_seq(reply: str, expected: tuple[int, int]) -> None:
    """The delivered count and stream sequence come from the right tokens of each form."""
    assert _parse_reply(reply) == expected


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "garbage",
        "_INBOX.abc.def",
        "$JS.ACK.S.C.x.y.5.1.0",  # 9 tokens, non-numeric
        "$JS.ACK.d.h.S.C.one.two.3.4.5.r",  # 12 tokens, non-numeric
        "$JS.ACK.S.C.1.5.5.1",  # 8 tokens
        "a.b.c.d.e.f.g.h.i.j",  # 10 tokens
    ],
)
def test_parse_reply_falls_back_on_garbage(reply: str) -> None:
    """An unparseable reply gives (attempt 1, seq 0) instead of raising."""
    assert _parse_reply(reply) == (1, 0)


def test_delivery_exposes_attempt_seq_and_headers() -> None:
    """A Delivery parses its reply on construction and tolerates missing headers."""
    d, _ = _delivery("$JS.ACK.S.C.6.123.5.1795325908066727278.0")
    assert (d.attempt, d.stream_seq) == (6, 123)
    assert d.headers == {}
    assert d.settled is False


async def test_ack_sends_plus_ack_to_the_reply_subject() -> None:
    """ack() publishes +ACK to the message's reply subject."""
    d, nc = _delivery()
    await d.ack()
    assert nc.sent == [(REPLY, b"+ACK")]
    assert d.settled


@pytest.mark.parametrize("delay", [None, 0, 0.0, -1])
async def test_nak_without_positive_delay_is_plain(delay: float | None) -> None:
    """nak() with no (or no positive) delay sends a bare -NAK."""
    d, nc = _delivery()
    await d.nak(delay)
    assert nc.sent == [(REPLY, b"-NAK")]


@pytest.mark.parametrize(
    ("delay", "payload"),
    [
        (2, b'-NAK {"delay":2000000000}'),
        (0.25, b'-NAK {"delay":250000000}'),
        (600, b'-NAK {"delay":600000000000}'),
    ],
)
async def test_nak_with_delay_sends_nanoseconds(delay: float, payload: bytes) -> None:
    """nak(delay) sends the delay in nanoseconds as JSON."""
    d, nc = _delivery()
    await d.nak(delay)
    assert nc.sent == [(REPLY, payload)]


async def test_term_with_reason() -> None:
    """term(reason) sends +TERM followed by the reason."""
    d, nc = _delivery()
    await d.term("reason")
    assert nc.sent == [(REPLY, b"+TERM reason")]


async def test_term_without_reason() -> None:
    """term() with no reason sends a bare +TERM."""
    d, nc = _delivery()
    await d.term()
    assert nc.sent == [(REPLY, b"+TERM")]


async def test_term_reason_is_one_bounded_line() -> None:
    """A term reason with newlines is flattened and cut to 200 characters."""
    d, nc = _delivery()
    await d.term("a\r\nb\n" + "x" * 500)
    ((_, data),) = nc.sent
    assert data.startswith(b"+TERM a  b ")
    assert b"\r" not in data and b"\n" not in data
    assert len(data) == len(b"+TERM ") + 200


async def test_in_progress_may_repeat_until_settled() -> None:
    """in_progress() sends +WPI each time, but nothing once the job is settled."""
    d, nc = _delivery()
    await d.in_progress()
    await d.in_progress()
    await d.ack()
    await d.in_progress()
    assert nc.sent == [(REPLY, b"+WPI"), (REPLY, b"+WPI"), (REPLY, b"+ACK")]


@pytest.mark.parametrize("first", ["ack", "nak", "term"])
async def test_only_the_first_settling_verb_is_sent(first: str) -> None:
    """After ack, nak or term, every later settling verb is ignored."""
    d, nc = _delivery()
    await getattr(d, first)()
    await d.ack()
    await d.nak(5)
    await d.term("late")
    await d.nak()
    assert len(nc.sent) == 1
    assert nc.sent[0][1] == {"ack": b"+ACK", "nak": b"-NAK", "term": b"+TERM"}[first]


async def test_no_reply_subject_means_nothing_is_sent() -> None:
    """A message without a reply subject (not from a consumer) is never answered."""
    d, nc = _delivery(reply="")
    await d.in_progress()
    await d.ack()
    await d.term("x")
    assert nc.sent == []


@pytest.mark.parametrize("delay", [float("inf"), float("nan"), 1e30])
def test_retry_refuses_delays_no_nak_can_carry(delay: float) -> None:
    """Infinite, NaN or absurd Retry delays are refused when raised, not when the nak is sent."""
    with pytest.raises(ValueError):
        Retry(delay=delay)


async def test_nak_after_retry_with_longest_delay_is_sent() -> None:
    """The longest delay Retry accepts still turns into a nak."""
    retry = Retry(delay=364 * 86400.0)
    decision = decide(
        Outcome(OutcomeKind.RETRY, retry.reason, retry_delay=retry.delay), 1, RetryPolicy(3, 1.0, 60.0)
    )
    d, nc = _delivery()
    await d.nak(decision.delay)
    assert len(nc.sent) == 1
    assert nc.sent[0][1].startswith(b"-NAK")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (REPLY, 1795325908.066727278),
        ("$JS.ACK._.ACCHASH123.JSW_APP.default.2.77.12.1795325908066727278.0", 1795325908.066727278),
        ("$JS.ACK._.ACCHASH123.JSW_APP.default.2.77.12.1795325908066727278.0.tok", 1795325908.066727278),
        ("", None),
        ("$JS.ACK.S.C.1.5.5.x.0", None),
    ],
)
def test_stored_at_reads_the_timestamp_token(reply: str, expected: float | None) -> None:
    """When the server stored a message comes from the timestamp token of each reply form."""
    assert _delivery(reply)[0].stored_at == expected
