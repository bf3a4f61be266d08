"""Which error answers of the JetStream API are worth the same request again."""

from __future__ import annotations

import json

import nats.js.errors
import pytest

from jsworker._errors import ApiError
from jsworker.jetstream.api import classify, parse_reply

# (status, err_code, description, transient)
ANSWERS = [
    (503, 0, "no responders", True),
    # A write whose message id the stream's leader has proposed and not yet applied: sent
    # again with the same id, it is answered as a duplicate once the first is stored.
    (409, 10158, "duplicate message id is in process", True),
    (400, 10071, "wrong last sequence: 5", False),
    (404, 10059, "stream not found", False),
]


@pytest.mark.parametrize(("code", "err_code", "description", "transient"), ANSWERS)
def test_an_error_answer_says_whether_to_try_again(
    code: int, err_code: int, description: str, transient: bool
) -> None:
    body = json.dumps({"error": {"code": code, "err_code": err_code, "description": description}})
    with pytest.raises(ApiError) as answered:
        parse_reply(body.encode())
    assert answered.value.failure.transient is transient
    assert answered.value.failure.err_code == err_code
    # The same answer raised by nats-py's own JetStream calls is judged alike.
    raised = nats.js.errors.APIError(code=code, err_code=err_code, description=description)
    assert classify(raised).transient is transient
