"""Pointing an app at other servers (a test suite gives each test its own) applies from the
next enqueue: the sync connection opened for the first server is not kept. An enqueue that
gets no acknowledgement names the servers it waited for."""

from __future__ import annotations

import gc
import re
import sys
import threading

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


def test_closing_the_app_ends_what_ran_on_its_loop(nats_server: NatsServer) -> None:
    """``app.close()`` returns once the sync connection's loop has ended its tasks and closed:
    garbage collected right after, nothing of the client is found still pending. (Before, the
    close returned while the loop was still ending, and a client's subscription task could
    be destroyed pending, in whatever code ran next.)"""
    app = App("closing", publish_timeout=1)

    @app.task
    def job(n: int) -> None: ...

    before = set(threading.enumerate())
    with NatsServer() as first:
        app.servers = [first.url]
        job.delay(1)
        app.servers = [nats_server.url]
        job.delay(2)
    nats_server.stop()
    with pytest.raises(EnqueueError):
        job.delay(3)
    unraisable: list[str] = []
    hook = sys.unraisablehook
    sys.unraisablehook = lambda u: unraisable.append(repr(u.exc_value))
    ours = [t for t in threading.enumerate() if t.name == "jsworker-producer" and t not in before]
    assert ours, "the sync enqueues ran on no thread of their own"
    try:
        app.close()
        ended = not any(t.is_alive() for t in ours)
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert ended, "app.close() returned while its loop's thread still ran"
    assert unraisable == []
