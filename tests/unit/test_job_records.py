"""Job records and the result waiter's bookkeeping, without a server."""

from __future__ import annotations

from typing import Any

import pytest

from jsworker import JSONSerializer, SerializationError
from jsworker._lifecycle.state import JobError, JobRecord, JobState, SuccessRecords
from jsworker._lifecycle.waiter import ResultWaiter
from jsworker._wire.names import Namespace

pytestmark = pytest.mark.anyio


def test_records_keep_json_values_inline_and_others_as_base64() -> None:
    ok = JobRecord(
        JobState.SUCCEEDED, "q", "t", seq=3, attempts=1, content_type="application/json", value=b'{"a":[1]}'
    )
    data = ok.encode()
    assert b'"value":{"a":[1]}' in data  # readable as it is stored
    back = JobRecord.decode(data)
    assert back.result(JSONSerializer()) == {"a": [1]} and back.seq == 3
    raw = JobRecord(JobState.SUCCEEDED, "q", "t", content_type="application/x-other", value=b"\x00\xff")
    assert JobRecord.decode(raw.encode()).value == b"\x00\xff"
    failed = JobRecord(JobState.FAILED, "q", "t", error=JobError("ValueError", "bad", "Traceback ..."))
    assert JobRecord.decode(failed.encode()).status("j").error == JobError(
        "ValueError", "bad", "Traceback ..."
    )
    with pytest.raises(SerializationError):
        JobRecord.decode(b'{"state": "nonsense"}')


@pytest.mark.parametrize(
    ("content_type", "value"),
    [
        ("application/json", b'{"a":"\\u00e9"}'),
        ("application/json", b"null"),
        ("application/x-other", b"\x00\xff"),
        ("application/json", None),  # a success whose value is not kept (final states kept)
    ],
)
def test_success_records_are_encoded_as_job_records_are(content_type: str, value: bytes | None) -> None:
    fast = SuccessRecords('h"ost:12', content_type)
    for queue, task in (("q", "mod.t"), ("q", "mod.t"), ("émails", 'odd"name')):  # cached, then new
        expected = JobRecord(
            JobState.SUCCEEDED,
            queue,
            task,
            seq=41,
            attempts=2,
            started_at=1700000000.123456,
            finished_at=1700000001.5,
            worker='h"ost:12',
            content_type=content_type if value is not None else None,
            value=value,
        )
        fast_record = fast.encode(queue, task, 41, 2, 1700000000_123456, 1700000001_500000, value)
        assert JobRecord.decode(fast_record) == JobRecord.decode(expected.encode())
        assert fast_record.replace(b"1.500000", b"1.5") == expected.encode()


async def test_a_record_seen_before_its_waiter_came_answers_it() -> None:
    """The subscription can see a finished record before the stream has stored it and before
    the caller waits for it (a fast job): the waiter must still get it, not time out."""
    waiter = ResultWaiter(conn=Any, namespace=Namespace("a"))  # type: ignore[arg-type]
    waiter._subscribed = True

    async def stored_nowhere(job_id: str) -> None:
        return None

    waiter.records.read = stored_nowhere  # type: ignore[method-assign]
    record = JobRecord(JobState.SUCCEEDED, "q", "t", seq=5)
    await waiter._on_record("$KV.jsw_a_jobs.j1", record.encode())
    assert (await waiter.wait("j1", 5, timeout=1)).seq == 5
    with pytest.raises(TimeoutError):
        await waiter.wait("j1", 6, timeout=0.05)  # another run of the same id is not answered by it
