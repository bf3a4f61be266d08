"""A page of a listing and the cursor that asks for the next one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from .._errors import ConfigurationError

T = TypeVar("T")

#: The largest page a listing hands out: a page is held in memory whole.
MAX_LIMIT = 10_000
#: The largest stream sequence there can be (JetStream counts in unsigned 64-bit integers).
MAX_SEQ = 2**64 - 1


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a listing.

    ``items`` come in the order asked for. ``next_after`` is the cursor to pass as ``after``
    for the next page: None when the listing is known to have ended; a full page always has
    one, and the page after it may be empty. ``reads`` counts the messages (and answers
    finding none) the server sent to build the page: what it cost the server.
    """

    items: tuple[T, ...]
    next_after: str | None
    reads: int = 0


def check_limit(limit: int) -> int:
    """``limit`` if it is a page size (1 to :data:`MAX_LIMIT`), else :class:`ConfigurationError`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ConfigurationError(f"limit must be an int from 1 to {MAX_LIMIT}, not {limit!r}")
    return limit


def seq_cursor(after: str | int | None) -> int:
    """The stream sequence a cursor names (0 for None: from the start), else
    :class:`ConfigurationError`."""
    if after is None:
        return 0
    text = str(after).strip()
    if isinstance(after, bool) or not is_seq(text, 0):
        raise ConfigurationError(f"not a cursor of this listing: {text[:40]!r} (a stream sequence)")
    return int(text)


def is_seq(text: str, least: int = 1) -> bool:
    """Whether ``text`` is a stream sequence from ``least`` to :data:`MAX_SEQ` in digits."""
    # The length first: int() of a very long string costs, and such a string is none.
    return len(text) <= 20 and text.isascii() and text.isdigit() and least <= int(text) <= MAX_SEQ
