"""Dead-letter messages: subject, id, headers and body of a job that will never run again."""

from __future__ import annotations

import json
import traceback
from typing import Any

import pytest

from jsworker._deadletters.format import MAX_HEADER_BYTES, dead_letter_message, task_token
from jsworker._wire.names import Namespace

NS = Namespace("shop")
BODY = b'{"args":[1,"\xc3\xa9"],"kwargs":{}}\x00\xff'


def _letter(**overrides: Any) -> Any:
    kwargs: dict[str, Any] = {
        "subject": "jsw.shop.q.emails.send",
        "body": BODY,
        "headers": {"Nats-Msg-Id": "job-1", "Jsw-Task": "send", "X-Trace": "abc"},
        "job_id": "job-1",
        "task": "send",
        "queue": "emails",
        "attempt": 3,
        "reason": "boom",
        "error": None,
    }
    kwargs.update(overrides)
    return dead_letter_message(NS, **kwargs)


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_subject_uses_the_dlq_prefix() -> None:
    """A dead letter goes to jsw.<app>.dlq.<queue>.<task>."""
    assert _letter().subject == "jsw.shop.dlq.emails.send"


@pytest.mark.parametrize("task", ["a.b", "x >", "*", "", "evil\r\nX-Injected: 1", "t" * 65])
def test_hostile_task_names_become_invalid_token(task: str) -> None:
    """A task name that is not a valid token is replaced by _invalid in the subject."""
    msg = _letter(task=task)
    assert msg.subject == "jsw.shop.dlq.emails._invalid"
    assert task_token(task) == "_invalid"


def test_task_token_keeps_valid_names() -> None:
    """A valid task name is used as-is."""
    assert task_token("send-email_2") == "send-email_2"


@pytest.mark.parametrize(("job_id", "attempt"), [("job-1", 3), ("seq-17", 1)])
def test_msg_id_is_job_id_and_attempt(job_id: str, attempt: int) -> None:
    """Without a dedup key of its own, Nats-Msg-Id is '<job id>:<attempt>'."""
    msg = _letter(job_id=job_id, attempt=attempt, headers={"Jsw-Task": "send"})
    assert msg.headers["Nats-Msg-Id"] == f"{job_id}:{attempt}"
    assert msg.headers["Jsw-Job-Id"] == job_id
    assert msg.headers["Jsw-Dlq-Attempts"] == str(attempt)


def test_describes_what_happened() -> None:
    """The Jsw-* headers record task, queue, original subject, reason and time."""
    h = _letter().headers
    assert h["Jsw-Task"] == "send"
    assert h["Jsw-Queue"] == "emails"
    assert h["Jsw-Original-Subject"] == "jsw.shop.q.emails.send"
    assert h["Jsw-Dlq-Reason"] == "boom"
    assert int(h["Jsw-Dlq-At"]) > 1_600_000_000 * 10**9
    assert "Jsw-Dlq-Error" not in h
    assert "Jsw-Dlq-Traceback" not in h


def test_header_values_never_contain_cr_or_lf() -> None:
    """Reason, error text and task name with CR/LF are flattened to one line."""
    err = _raised(ValueError("line one\r\nline two\nline three"))
    msg = _letter(
        reason="first\r\nsecond\rthird\nfourth",
        error=err,
        task="bad\r\nX-Injected: yes",
    )
    for key, value in msg.headers.items():
        assert "\r" not in value and "\n" not in value, (key, value)
    assert msg.headers["Jsw-Dlq-Reason"] == "first second third fourth"
    assert msg.headers["Jsw-Dlq-Error"] == "line one line two line three"
    assert msg.headers["Jsw-Task"] == "bad X-Injected: yes"


def test_job_id_header_is_flattened() -> None:
    """A job id carrying a newline is recorded on one line in Jsw-Job-Id."""
    assert _letter(job_id="job\n1").headers["Jsw-Job-Id"] == "job 1"


def test_long_reason_is_truncated() -> None:
    """A huge reason is cut so the header stays bounded."""
    msg = _letter(reason="r" * 5000)
    assert 0 < len(msg.headers["Jsw-Dlq-Reason"]) <= 1000


def test_empty_task_name_is_recorded_as_invalid() -> None:
    """A job with no task name still gets a non-empty Jsw-Task header."""
    assert _letter(task="").headers["Jsw-Task"] == "_invalid"


def test_error_type_and_traceback_json_round_trip() -> None:
    """The traceback header is JSON that decodes back to the formatted traceback text."""
    err = _raised(KeyError("missing\nkey"))
    msg = _letter(error=err)
    h = msg.headers
    assert h["Jsw-Dlq-Error-Type"] == "KeyError"
    tb = json.loads(h["Jsw-Dlq-Traceback"])
    assert tb == "".join(traceback.format_exception(err))
    assert "Traceback (most recent call last)" in tb
    assert "_raised" in tb
    assert "\n" in tb
    assert "\n" not in h["Jsw-Dlq-Traceback"] and "\r" not in h["Jsw-Dlq-Traceback"]


def test_traceback_keeps_the_tail_when_too_long() -> None:
    """An enormous traceback is cut from the front, keeping the exception line at the end."""
    err = _raised(ValueError("v" * 20000 + "END"))
    tb = json.loads(_letter(error=err).headers["Jsw-Dlq-Traceback"])
    assert len(tb) == 8000
    assert tb.endswith("END\n")


def test_error_type_uses_qualname() -> None:
    """Nested exception classes are named by their qualified name."""

    class Outer:
        class Inner(Exception):
            pass

    msg = _letter(error=_raised(Outer.Inner("x")))
    assert msg.headers["Jsw-Dlq-Error-Type"].endswith("Outer.Inner")


def test_original_headers_are_kept() -> None:
    """Headers of the job message that do not steer publishing survive into the dead letter."""
    h = _letter(headers={"X-Trace": "abc", "Jsw-Enqueued-At": "123", "Content-Type": "application/json"})
    assert h.headers["X-Trace"] == "abc"
    assert h.headers["Jsw-Enqueued-At"] == "123"
    assert h.headers["Content-Type"] == "application/json"


def test_msg_id_is_the_jobs_dedup_key_and_attempt() -> None:
    """'<job's Nats-Msg-Id>:<attempt>': a re-stored dead letter deduplicates, while a replayed
    job (same id, new dedup key, attempt 1 again) gets a dead letter of its own."""
    first = _letter(headers={"Nats-Msg-Id": "job-9"}, job_id="job-9", attempt=1)
    replayed = _letter(headers={"Nats-Msg-Id": "job-9:replay:4"}, job_id="job-9", attempt=1)
    assert first.headers["Nats-Msg-Id"] == "job-9:1"
    assert replayed.headers["Nats-Msg-Id"] == "job-9:replay:4:1"
    assert replayed.headers["Jsw-Job-Id"] == "job-9"


@pytest.mark.parametrize(
    "header",
    [
        "Nats-Expected-Stream",
        "Nats-Expected-Last-Sequence",
        "Nats-TTL",
        "Nats-Rollup",
        "Nats-Expected-Last-Msg-Id",
        "Nats-Expected-Last-Subject-Sequence",
        "Nats-Schedule",
        "nats-ttl",
    ],
)
def test_publish_steering_headers_are_dropped(header: str) -> None:
    """Headers that steer a JetStream publish (Nats-Expected-*, TTL, rollup) are not copied."""
    msg = _letter(headers={header: "7", "X-Keep": "yes"})
    assert header not in msg.headers
    assert msg.headers["X-Keep"] == "yes"


def test_body_is_byte_identical() -> None:
    """The dead letter's body is exactly the job's payload, even if it is not valid UTF-8."""
    assert _letter().body == BODY
    assert _letter(body=b"").body == b""


def test_dead_letter_shrinks_to_fit_max_payload() -> None:
    """A job that nearly filled max_payload still gets a dead letter that fits: the traceback and
    error go first, then the body is cut and its original size recorded."""
    from jsworker._wire.headers import BODY_TRUNCATED, DLQ_ERROR, DLQ_TRACEBACK

    try:
        raise ValueError("x" * 900)
    except ValueError as exc:
        error = exc
    big = b"b" * 4000
    roomy = _letter(body=big, error=error)
    assert DLQ_TRACEBACK in roomy.headers
    limit = len(big) + 400
    fitted = _letter(body=big, error=error, max_payload=limit)
    assert fitted.size <= limit
    assert DLQ_TRACEBACK not in fitted.headers and DLQ_ERROR not in fitted.headers
    assert fitted.body == big
    cut = _letter(body=big, error=error, max_payload=3000)
    assert cut.size <= 3000
    assert cut.headers[BODY_TRUNCATED] == "4000"
    assert big.startswith(cut.body) and len(cut.body) < 4000


def test_a_job_cannot_forge_what_its_dead_letter_says() -> None:
    """Jsw-Dlq-* headers on the job are dropped: only the worker writes them."""
    forged = {
        "Nats-Msg-Id": "job-1",
        "Jsw-Task": "send",
        "Jsw-Dlq-Traceback": '"forged"',
        "jsw-dlq-body-truncated": "5",
        "Jsw-Dlq-Reason": "forged",
    }
    headers = _letter(headers=forged).headers
    assert "Jsw-Dlq-Traceback" not in headers and "jsw-dlq-body-truncated" not in headers
    assert headers["Jsw-Dlq-Reason"] == "boom"


def test_headers_over_the_servers_limit_are_dropped_largest_first() -> None:
    """A job with 65,300 bytes of headers still gets a dead letter within 64 KiB of headers,
    saying which of its headers were left out; the worker's own headers all stay."""
    big = {"Nats-Msg-Id": "job-1", "Jsw-Task": "send", "X-Small": "s", "X-Big": "x" * 65_300}
    msg = _letter(headers=big, error=_raised(ValueError("bad")))
    header_bytes = msg.size - len(msg.body)
    assert header_bytes <= MAX_HEADER_BYTES
    assert msg.headers["Jsw-Dlq-Headers-Dropped"] == "X-Big"
    assert msg.headers["X-Small"] == "s"
    for kept in ("Jsw-Job-Id", "Jsw-Task", "Jsw-Dlq-Reason", "Jsw-Dlq-Traceback", "Nats-Msg-Id"):
        assert kept in msg.headers, kept


def test_headers_within_the_limit_are_all_kept() -> None:
    msg = _letter(headers={"Nats-Msg-Id": "job-1", "X-Big": "x" * 50_000})
    assert msg.headers["X-Big"] == "x" * 50_000
    assert "Jsw-Dlq-Headers-Dropped" not in msg.headers
