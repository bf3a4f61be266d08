"""Pointing an app at other servers (a test suite gives each test its own) applies from the
next enqueue: the sync connection opened for the first server is not kept. An enqueue that
gets no acknowledgement names the servers it waited for."""

from __future__ import annotations

import re

import pytest

from jsworker import App, EnqueueError
from jsworker.testing import NatsServer

from ..support import stream_messages


def test_the_next_enqueue_goes_to_the_new_servers(nats_server: NatsServer) -> None:
    app = App("moving", publish_timeout=2)

    @app.task
    def job(n: int) -> None: ...

    try:
        with NatsServer() as first:
            app.servers = [first.url]
            job.delay(1)  # opens the sync connection to the first server
            app.servers = [nats_server.url]
            job.delay(2)
            assert stream_messages(nats_server.url, "JSW_MOVING") == 1
            assert stream_messages(first.url, "JSW_MOVING") == 1
        # The server goes away under an open connection: the error says which it waited for.
        nats_server.stop()
        with pytest.raises(EnqueueError, match=f"not acknowledged by {re.escape(nats_server.url)} after"):
            job.delay(3)
    finally:
        app.close()
