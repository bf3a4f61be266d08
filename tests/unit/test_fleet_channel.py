"""The worker process's end of the fleet channel, over a real pipe."""

from __future__ import annotations

import multiprocessing
import threading

from jsworker._fleet.channel import ChildChannel, Kind, decode

THREADS, MESSAGES, SIZE = 4, 10, 300_000


def _read_all(reader: multiprocessing.connection.Connection, n: int) -> list[tuple[Kind, str]]:
    return [decode(reader.recv_bytes()) for _ in range(n)]


def test_large_messages_from_several_threads_arrive_whole() -> None:
    """A snapshot is far larger than a pipe's atomic write: threads sending at once must not
    mix their bytes (the supervisor would lose those messages)."""
    reader, writer = multiprocessing.Pipe(duplex=False)
    channel = ChildChannel(writer)
    got: list[tuple[Kind, str]] = []
    # Daemons: mixed bytes leave the reader waiting for a length that never comes, and the
    # senders on a full pipe.
    receiving = threading.Thread(
        target=lambda: got.extend(_read_all(reader, THREADS * MESSAGES)), daemon=True
    )
    receiving.start()

    def send(letter: str) -> None:
        for _ in range(MESSAGES):
            channel.send(Kind.METRICS, letter * SIZE)

    senders = [threading.Thread(target=send, args=(chr(ord("a") + i),), daemon=True) for i in range(THREADS)]
    for thread in senders:
        thread.start()
    receiving.join(timeout=30)
    assert not receiving.is_alive(), "the reader is stuck: messages were mixed"
    assert len(got) == THREADS * MESSAGES
    for kind, text in got:
        assert kind is Kind.METRICS
        assert len(text) == SIZE and text == text[0] * SIZE


def test_a_snapshot_taken_first_arrives_first() -> None:
    """The supervisor keeps the last snapshot of a process: one taken before another must
    not be sent after it (a periodic send still running when the final one is made)."""
    reader, writer = multiprocessing.Pipe(duplex=False)
    channel = ChildChannel(writer)
    taking = threading.Event()

    def slow_take() -> str:
        taking.set()
        # A snapshot that takes a while: the final one is asked for meanwhile.
        threading.Event().wait(0.2)
        return "older"

    periodic = threading.Thread(target=channel.send_snapshot, args=(slow_take,))
    periodic.start()
    assert taking.wait(10)
    channel.send_snapshot(lambda: "newer")
    periodic.join(10)
    assert _read_all(reader, 2) == [(Kind.METRICS, "older"), (Kind.METRICS, "newer")]
