"""Reading a stream backwards in windows, and merging sources in sequence order, without a
server: the stored sequences are a list here."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest

from jsworker.jetstream.limits_stream import StoredMessage
from jsworker.jetstream.pages import merged, newest_first, take

pytestmark = pytest.mark.anyio


def _msg(seq: int) -> StoredMessage:
    return StoredMessage(seq=seq, subject=f"s.{seq}", headers={}, body=None, size=0)


class _Stream:
    """Stored sequences, read by window as :func:`newest_first` asks, counting what it reads."""

    def __init__(self, seqs: list[int]) -> None:
        self.seqs = seqs
        self.windows: list[tuple[int, int, int]] = []
        self.read = 0

    async def window(self, start: int, end: int, keep: int) -> list[StoredMessage]:
        self.windows.append((start, end, keep))
        inside = [s for s in self.seqs if start <= s < end]
        self.read += len(inside)
        return [_msg(s) for s in inside[-keep:]]


async def _newest(stream: _Stream, before: int, want: int) -> list[int]:
    return [m.seq async for m in newest_first(stream.window, before, 1, want)][:want]


async def test_a_dense_stream_is_read_back_one_window_a_page() -> None:
    stream = _Stream(list(range(1, 1001)))
    assert await _newest(stream, 1001, 10) == list(range(1000, 990, -1))
    assert stream.windows == [(991, 1001, 10)] and stream.read == 10


async def test_sparse_stretches_double_the_window_and_keep_only_what_the_page_takes() -> None:
    # Ten messages far back, one recent: the windows double until they reach them.
    stream = _Stream([*range(100, 110), 5000])
    assert await _newest(stream, 6000, 5) == [5000, 109, 108, 107, 106]
    spans = [end - start for start, end, _ in stream.windows]
    assert spans[:4] == [5, 10, 20, 40] and len(spans) <= 12  # a read a doubling, not one a message
    # A window never keeps more than what the page still needs.
    assert all(keep <= 5 for _, _, keep in stream.windows)


async def test_the_floor_ends_the_read() -> None:
    stream = _Stream([3, 7])
    assert await _newest(stream, 100, 10) == [7, 3]
    assert stream.windows[-1][0] == 1


async def _source(seqs: list[int]) -> AsyncGenerator[StoredMessage, None]:
    for seq in seqs:
        yield _msg(seq)


async def test_sources_merge_in_sequence_order_either_way() -> None:
    up = [m.seq async for m in merged([_source([1, 4, 9]), _source([2, 3, 10]), _source([])], False)]
    assert up == [1, 2, 3, 4, 9, 10]
    down = [m.seq async for m in merged([_source([9, 4, 1]), _source([10, 3, 2])], True)]
    assert down == [10, 9, 4, 3, 2, 1]
    assert [m.seq for m in await take([_source([1, 5]), _source([2, 6])], False, 3)] == [1, 2, 5]
