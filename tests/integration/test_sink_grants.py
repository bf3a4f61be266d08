"""What a producer may do with the stream of Spark streaming sinks' committed micro-batches
(``App(spark_sinks=True)``), with the credentials ``jsworker permissions`` prints: add a
batch's record and read one, nothing more. It cannot remove or replace a record (delete,
purge, rollup, a time to live), nor make it fire copies (a schedule), so a batch recorded as
committed stays skipped."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from jsworker import PermissionDeniedError
from jsworker._errors import WriteRefused
from jsworker.jetstream.api import api_subject, request_json
from jsworker.jetstream.connection import Connection
from jsworker.jetstream.limits_stream import LimitsStream
from jsworker.jetstream.stored import SubjectMoved, write
from jsworker.testing import NatsServer

from .secured import provision, role_session

STREAM = "JSW_PERM_SINKS"
RECORD = "jsw.perm.sink.0123456789abcdef0123456789abcdef"


def test_a_producer_adds_batch_records_and_removes_none(secured: NatsServer, tmp_path: Path) -> None:
    url = secured.url
    provision(url, "perm_sink_app")

    async def attack() -> None:
        async with role_session(url, "perm-producer") as producer:
            conn = await Connection.open(producer.connect_options("producer", "attack"))
            try:
                await write(conn, RECORD, b'{"batch":0}', {}, expect_last=0)
                assert (await LimitsStream(conn, STREAM).last(RECORD)) is not None
                with pytest.raises(SubjectMoved):  # written once: a second record is refused
                    await write(conn, RECORD, b'{"batch":0,"forged":1}', {}, expect_last=0)
                for verb, request in (
                    ("STREAM.MSG.DELETE", {"seq": 1}),
                    ("STREAM.PURGE", {}),
                    ("STREAM.UPDATE", {"name": STREAM, "subjects": ["jsw.perm.sink.*"]}),
                    ("STREAM.DELETE", {}),
                ):
                    with pytest.raises(PermissionDeniedError):
                        await request_json(conn, api_subject(verb, STREAM), request)
                # Headers that would remove the record are refused by the stream itself.
                for header in (
                    {"Nats-Rollup": "sub"},
                    {"Nats-TTL": "1s"},
                    {"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": RECORD},
                ):
                    with pytest.raises(WriteRefused):
                        await write(conn, RECORD, b"{}", header)
                found = await LimitsStream(conn, STREAM).last(RECORD)
                assert found is not None and found.body == b'{"batch":0}'
            finally:
                await conn.close()

    asyncio.run(attack())
