"""Header blocks on the worker's connection: written, and read faster than nats-py reads them.

Every job message carries a header block, and nats-py parses each one line by line in Python,
a sixth of a busy worker's CPU per no-op job. :func:`parse_plain_headers` reads the blocks the
servers and clients write (``Name: Value`` lines, UTF-8, no stray whitespace) in a few string
operations, and gives any other block back (None) for nats-py's own parser, so the headers a
message gets are the same either way.

:class:`HeaderShapes` goes one step further for the blocks that repeat a shape: the jobs of
one queue carry the same header names in the same order (their producer writes them so), and
such a block is read by one regular expression made for that shape, in three fifths of the
time (bench/README.md, "Hot-path choices").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from operator import methodcaller
from typing import Any

_HEAD = "NATS/1.0\r\n"
_END = "\r\n\r\n"
# What bytes.strip() removes, which nats-py applies to names and values.
_WHITESPACE = " \t\n\r\x0b\x0c"
_split_line = methodcaller("split", ": ", 1)
# A value a shape's expression takes: printable ASCII, at least one character, no blank at
# either end. Any other (non-ASCII, empty, a tab) sends its block the longer way.
_VALUE = "([!-~](?:[ -~]*[!-~])?)"
# The shapes one connection learns: a producer's blocks come in a handful of them, and a
# stream of ever new names must not cost an expression per message.
_MAX_SHAPES = 8
# Past this many headers a block is read the longer way (and no expression grows with it).
_MAX_NAMES = 32


def parse_plain_headers(block: bytes) -> dict[str, str] | None:
    """The headers of a plain header block, or None when the block needs the full parser.

    Plain means: a bare ``NATS/1.0`` first line (no status), at least one header, strict
    UTF-8, every line ``Name: Value`` with an ASCII name free of spaces, controls and
    colons, and a value that does not start or end with whitespace.
    """
    try:
        text = block.decode()
    except UnicodeDecodeError:
        return None
    if not text.startswith(_HEAD) or not text.endswith(_END) or len(text) <= len(_HEAD) + len(_END):
        return None
    try:
        headers = dict(map(_split_line, text[len(_HEAD) : -len(_END)].split("\r\n")))
    except ValueError:  # a line without ": "
        return None
    names = "".join(headers)
    if not (names.isascii() and names.isprintable()) or " " in names or ":" in names:
        return None
    for value in headers.values():
        if value != value.strip(_WHITESPACE):
            return None
    return headers


def encode_headers(headers: Mapping[str, str]) -> bytes:
    """The header block nats-py's ``publish`` writes for ``headers``."""
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return f"{_HEAD}{lines}\r\n".encode()


class _Shape:
    """One shape of header block: its names in order, the expression that reads a block of
    exactly those lines (a group for each value), and ``build``, which makes the headers of
    the groups."""

    __slots__ = ("build", "fullmatch", "names")

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        lines = "".join(f"{re.escape(name)}: {_VALUE}\r\n" for name in names)
        self.fullmatch = re.compile(f"{re.escape(_HEAD)}{lines}\r\n").fullmatch
        self.build = _builder(len(names))(*names)


def _builder(count: int) -> Callable[..., Callable[[tuple[str, ...]], dict[str, str]]]:
    """A maker of functions that turn ``count`` values into a dict under the names given to the
    maker: ``{k0: v0, ...}`` written out makes a job's four headers in 0.13 µs, where
    ``dict(zip(names, values))`` takes 0.31 µs (bench/README.md, "Hot-path choices"). The
    generated source holds only numbered identifiers; the names, which come from the wire,
    are bound as arguments."""
    made = _BUILDERS.get(count)
    if made is None:
        keys = ", ".join(f"k{i}" for i in range(count))
        values = "".join(f"v{i}, " for i in range(count))
        items = ", ".join(f"k{i}: v{i}" for i in range(count))
        source = (
            f"def make({keys}):\n"
            f"    def build(found):\n"
            f"        {values}= found\n"
            f"        return {{{items}}}\n"
            f"    return build\n"
        )
        scope: dict[str, Any] = {}
        exec(source, scope)  # numbered identifiers only, see above
        made = _BUILDERS[count] = scope["make"]
    return made


_BUILDERS: dict[int, Callable[..., Callable[[tuple[str, ...]], dict[str, str]]]] = {}


class HeaderShapes:
    """:func:`parse_plain_headers` with an expression for each repeated shape of block.

    A block read the plain way teaches its shape (its names in order) once the next block read
    that way has it too; later blocks are tried against the shape learnt last. A block the
    expression takes gives the headers the plain way gives it: the expression takes the
    shape's names literally, each once, and only values the plain way keeps as they are.
    """

    __slots__ = ("_current", "_last", "_learnt")

    def __init__(self) -> None:
        self._current: _Shape | None = None
        self._last: tuple[str, ...] | None = None  # the names of the last block read the plain way
        self._learnt: dict[tuple[str, ...], _Shape] = {}

    @property
    def shapes(self) -> int:
        """How many shapes it has learnt (at most eight)."""
        return len(self._learnt)

    def parse(self, block: bytes) -> dict[str, str] | None:
        """The headers of ``block``, or None when it needs nats-py's parser."""
        current = self._current
        if current is not None:
            # Latin-1 never fails and keeps ASCII as it is: the expression takes nothing else.
            found = current.fullmatch(block.decode("latin-1"))
            if found is not None:
                return current.build(found.groups())  # a group for each name, by construction
        headers = parse_plain_headers(block)
        if headers is not None:
            self._learn(tuple(headers))
        return headers

    def _learn(self, names: tuple[str, ...]) -> None:
        shape = self._learnt.get(names)
        if (
            shape is None
            and names == self._last
            and len(names) <= _MAX_NAMES
            and len(self._learnt) < _MAX_SHAPES
        ):
            shape = self._learnt[names] = _Shape(names)
        self._last = names
        if shape is not None:
            self._current = shape
