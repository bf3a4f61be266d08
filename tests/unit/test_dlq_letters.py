"""Reading dead letters out of stored messages, and the job message a replay sends; no server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jsworker import App, ConfigurationError, Reject, SerializationError
from jsworker._cli.dlq import _table, letter_json
from jsworker._deadletters import (
    DeadLetter,
    DeadLetterNotFound,
    DeadLetterNotReplayable,
    DeadLetters,
)
from jsworker._deadletters.admin import _as_seq
from jsworker._deadletters.format import dead_letter_message
from jsworker.jetstream.limits_stream import StoredMessage

APP = App("shop", "nats://127.0.0.1:1")
BODY = b'{"args":[42,"\xc3\xa9"],"kwargs":{}}'
LIMIT = 1024 * 1024


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def _stored(seq: int = 7, loaded: bool = True, **overrides: Any) -> StoredMessage:
    """A dead letter as the worker builds it, as the server would hand it back."""
    kwargs: dict[str, Any] = {
        "subject": "jsw.shop.q.emails.send",
        "body": BODY,
        "headers": {"Nats-Msg-Id": "job-1", "Jsw-Task": "send", "X-Trace": "abc", "Content-Type": "x"},
        "job_id": "job-1",
        "task": "send",
        "queue": "emails",
        "attempt": 3,
        "reason": "boom",
        "error": _raised(Reject("no such address")),
    }
    kwargs.update(overrides)
    msg = dead_letter_message(APP.namespace, **kwargs)
    headers = {**msg.headers, "Nats-Sequence": str(seq)}  # what a direct get would add
    return StoredMessage(
        seq, msg.subject, headers, msg.body if loaded else None, len(msg.body), stored_at=1.5
    )


def test_fields_come_from_the_headers() -> None:
    """Every Jsw-* header lands in its field; the traceback is decoded back to lines."""
    letter = DeadLetter.from_stored(_stored())
    assert (letter.seq, letter.job_id, letter.task, letter.queue) == (7, "job-1", "send", "emails")
    assert (letter.attempts, letter.reason) == (3, "boom")
    assert (letter.error_type, letter.error) == ("Reject", "no such address")
    assert letter.traceback is not None
    assert letter.traceback.splitlines()[-1] == "jsworker._errors.Reject: no such address"
    assert letter.subject == "jsw.shop.q.emails.send"
    assert letter.failed_at is not None and letter.failed_at > 1e9
    assert letter.body == BODY and letter.size == len(BODY)


def test_headers_are_the_jobs_own() -> None:
    """No Jsw-Dlq-* and no Nats-*: what is left is the job's (plus its identity)."""
    headers = DeadLetter.from_stored(_stored()).headers
    assert headers["X-Trace"] == "abc" and headers["Jsw-Job-Id"] == "job-1"
    assert not [k for k in headers if k.lower().startswith(("jsw-dlq-", "nats-"))]


def test_missing_headers_fall_back() -> None:
    """A bare message: task and queue from its subject, the job id from its dedup key."""
    bare = StoredMessage(3, "jsw.shop.dlq.emails.send", {"Nats-Msg-Id": "j-9:2"}, b"", 0, stored_at=9.0)
    letter = DeadLetter.from_stored(bare)
    assert (letter.job_id, letter.task, letter.queue, letter.attempts) == ("j-9", "send", "emails", 0)
    assert (letter.failed_at, letter.traceback, letter.error_type) == (9.0, None, None)


def test_a_traceback_that_is_not_json_is_shown_as_is() -> None:
    """Only the worker writes JSON there; anything else is still worth showing."""
    msg = StoredMessage(1, "jsw.shop.dlq.q.t", {"Jsw-Dlq-Traceback": "Trace: x"}, b"", 0)
    assert DeadLetter.from_stored(msg).traceback == "Trace: x"


def test_payload_helpers() -> None:
    """JSON is decoded and indented; anything else shows as bytes; an unloaded body says so."""
    letter = DeadLetter.from_stored(_stored())
    assert letter.payload() == {"args": [42, "é"], "kwargs": {}}
    assert letter.pretty_payload() == json.dumps(
        {"args": [42, "é"], "kwargs": {}}, indent=2, ensure_ascii=False
    )
    binary = DeadLetter.from_stored(_stored(body=b"\x00\xff{"))
    assert binary.pretty_payload() == repr(b"\x00\xff{")
    with pytest.raises(SerializationError):
        binary.payload()
    unloaded = DeadLetter.from_stored(_stored(loaded=False))
    assert unloaded.size == len(BODY) and unloaded.pretty_payload() == "(not loaded)"
    with pytest.raises(SerializationError, match="not loaded"):
        unloaded.payload()


def test_letter_json() -> None:
    """--json output: everything, the body as payload and text when loaded."""
    out = json.loads(json.dumps(letter_json(DeadLetter.from_stored(_stored()))))
    assert out["payload"] == {"args": [42, "é"], "kwargs": {}}
    assert out["body_text"] == BODY.decode()
    assert out["traceback"].startswith("Traceback")
    assert "payload" not in letter_json(DeadLetter.from_stored(_stored(loaded=False)))


def test_replay_message() -> None:
    """Original subject and body, same job id, a fresh dedup key, no dead-letter headers."""
    letter = DeadLetter.from_stored(_stored(seq=12))
    msg = DeadLetters(APP)._prepare(letter, LIMIT)
    assert msg.subject == "jsw.shop.q.emails.send.job-1" and msg.body == BODY
    h = msg.headers
    assert (h["Nats-Msg-Id"], h["Jsw-Job-Id"], h["Jsw-Replayed-From"]) == ("job-1:replay:12", "job-1", "12")
    assert h["X-Trace"] == "abc" and h["Jsw-Task"] == "send" and h["Content-Type"] == "x"
    assert int(h["Jsw-Enqueued-At"]) > 1e18
    assert not [k for k in h if k.lower().startswith("jsw-dlq-")]
    assert "Jsw-Queue" not in h and "Jsw-Original-Subject" not in h


def test_replay_subject_of_a_foreign_letter() -> None:
    """An original subject that is not one of the app's job subjects is not published to."""
    letter = DeadLetter.from_stored(_stored(subject="elsewhere.q.emails.send"))
    assert DeadLetters(APP)._prepare(letter, LIMIT).subject == "jsw.shop.q.emails.send.job-1"


def test_a_cut_body_cannot_be_replayed() -> None:
    """The worker cut the body to fit max_payload: replaying its start would be a broken job."""
    big = b'{"args":["' + b"x" * 5000 + b'"],"kwargs":{}}'
    letter = DeadLetter.from_stored(_stored(body=big, max_payload=2000))
    assert letter.original_size == len(big) and letter.size < 2000
    assert DeadLetter.from_stored(_stored()).original_size is None
    with pytest.raises(DeadLetterNotReplayable, match="cut from"):
        DeadLetters(APP)._prepare(letter, LIMIT)


def test_a_replay_that_would_not_fit_is_refused() -> None:
    """Checked before sending: the server closes connections that send oversized headers."""
    letter = DeadLetter.from_stored(_stored())
    with pytest.raises(DeadLetterNotReplayable, match="over max_payload"):
        DeadLetters(APP)._prepare(letter, 100)


@pytest.mark.parametrize(
    "ref,seq", [(5, 5), ("5", 5), (" 12 ", 12), ("job-5", None), ("0", None), ("\uff15", None)]
)
def test_refs(ref: int | str, seq: int | None) -> None:
    """Ints and plain decimal strings are sequences; anything else is a job id."""
    assert _as_seq(ref) == seq


@pytest.mark.parametrize(
    "ref,error", [(0, DeadLetterNotFound), ("", ConfigurationError), (True, ConfigurationError)]
)
def test_bad_refs(ref: Any, error: type[Exception]) -> None:
    """No sequence 0; an empty or boolean reference is a mistake."""
    with pytest.raises(error):
        _as_seq(ref)


def test_table_truncates_the_reason() -> None:
    """The reason takes the width left, cut with '...'; the other columns stay whole."""
    letter = DeadLetter.from_stored(_stored(reason="x" * 300))
    lines = _table([letter], 100).splitlines()
    assert lines[0].split() == ["SEQ", "FAILED", "AT", "JOB", "ID", "TASK", "QUEUE", "ATTEMPTS", "REASON"]
    assert len(lines[1]) == 100 and lines[1].endswith("x...")
    assert lines[1].split()[:6] == ["7", letter.failed_at_iso, "job-1", "send", "emails", "3"]


def test_a_body_nested_100000_deep_is_shown_in_one_clear_line() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    letter = DeadLetter.from_stored(_stored(body=deep))
    shown = letter.pretty_payload()
    assert "nested too deeply" in shown and "\n" not in shown and len(shown) < 500
    with pytest.raises(SerializationError, match="nested too deeply"):
        letter.payload()


def test_list_escapes_control_characters_from_the_message() -> None:
    """A task name or reason from a hostile message cannot drive the terminal."""
    letter = DeadLetter.from_stored(_stored(task="ev\x1b[2Jil", reason="bad\x1b]0;title\x07"))
    table = _table([letter], 200)
    assert "\x1b" not in table and "\x07" not in table
    assert "\\x1b[2J" in table
