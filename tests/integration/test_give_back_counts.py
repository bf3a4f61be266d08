"""A job a limit gives back is counted as given back, not as a run that ended with no outcome,
even while its record cannot be written: otherwise a few give-backs in a row (a records bucket
electing its leader, say) make a job that never ran look like one that kills its workers, and
it is dead-lettered unrun."""

from __future__ import annotations

import asyncio

import nats.js.api
import pytest

from jsworker import App
from jsworker.testing import NatsServer

from ..support import connected, wait_until_async
from .workers import in_process_worker

pytestmark = pytest.mark.anyio


async def test_a_job_given_back_while_its_record_cannot_be_written_is_no_crash(
    nats_server: NatsServer,
) -> None:
    app = App("gbc", nats_server.url)
    gate = asyncio.Event()
    ran: list[int] = []

    # One job of an account at a time, and not one run that ends with no outcome forgiven.
    @app.task(partition_key=lambda account, **_: account, max_running_per_partition=1, max_crashes=0)
    async def one_at_a_time(account: str, n: int) -> None:
        ran.append(n)
        if n == 0:
            await gate.wait()

    await app.provision()
    first = await one_at_a_time.adelay("a", 0)
    async with in_process_worker(app), connected(nats_server.url) as nc:
        js = nc.jetstream()
        await wait_until_async(lambda: ran == [0], timeout=10, message="the first job to hold the lease")
        # From here no record can be written (each is larger than the bucket takes), while
        # records can still be read: what a records bucket losing writes looks like.
        bucket = (await js.stream_info("KV_jsw_gbc_jobs")).config
        bucket.max_msg_size = 16
        await js.update_stream(bucket)
        # The second waits in its slot for the lease; the third is given back, again and again.
        await one_at_a_time.adelay("a", 1)
        third = await one_at_a_time.adelay("a", 2)

        async def given_back() -> int:
            try:
                found = await js.get_last_msg("JSW_GBC_CLAIMS", f"jsw.gbc.claim.{third.seq}.back")
            except nats.js.errors.NotFoundError:
                return 0
            return int(found.data or b"0")

        # Given back twice: its third delivery was not taken for the second crash of a job
        # that may crash none.
        await wait_until_async(given_back, until=lambda n: n >= 2, timeout=30, message="two give-backs")
        gate.set()
        await wait_until_async(lambda: sorted(ran) == [0, 1, 2], timeout=30, message="every job to run")
        dead = await js.stream_info("JSW_GBC_DLQ")
        assert dead.state.messages == 0
    assert first.id
    await app.aclose()
