"""Header blocks of a repeated shape are read by an expression made for the shape, and come
out exactly as the plain way (and nats-py) reads them, whatever their values."""

from __future__ import annotations

import asyncio
import random

import pytest
from nats.aio.client import Client

from jsworker.jetstream import headers as headers_module
from jsworker.jetstream.headers import HeaderShapes, encode_headers, parse_plain_headers

NAMES = ("Nats-Msg-Id", "Jsw-Task", "Jsw-Enqueued-At", "Content-Type")


def _block(*values: str, names: tuple[str, ...] = NAMES) -> bytes:
    return encode_headers(dict(zip(names, values, strict=True)))


def _nats_py(block: bytes) -> dict[str, str] | None:
    return asyncio.run(Client()._process_headers(block))


def test_a_repeated_shape_is_learnt_and_read_without_the_plain_way(monkeypatch: pytest.MonkeyPatch) -> None:
    shapes = HeaderShapes()
    first, second, third = (
        _block(f"id{i}", "noop", str(1795325908066727278 + i), "application/json") for i in range(3)
    )
    assert shapes.parse(first) == parse_plain_headers(first)
    assert shapes.shapes == 0  # a shape seen once is not learnt
    assert shapes.parse(second) == parse_plain_headers(second)
    assert shapes.shapes == 1

    plain_way: list[bytes] = []

    def counted(block: bytes) -> dict[str, str] | None:
        plain_way.append(block)
        return parse_plain_headers(block)

    monkeypatch.setattr(headers_module, "parse_plain_headers", counted)
    assert shapes.parse(third) == {
        "Nats-Msg-Id": "id2",
        "Jsw-Task": "noop",
        "Jsw-Enqueued-At": "1795325908066727280",
        "Content-Type": "application/json",
    }
    assert plain_way == []
    # A value the shape does not take goes the plain way, and comes out as it does there.
    odd = _block("id3", "no op", "1", "application/json; charset=utf-8")
    assert shapes.parse(odd) == parse_plain_headers(odd) and plain_way == []
    spaced = (
        b"NATS/1.0\r\nNats-Msg-Id: id4 \r\nJsw-Task: noop\r\nJsw-Enqueued-At: 1\r\nContent-Type: x\r\n\r\n"
    )
    # One that is not plain either is left to nats-py's parser.
    assert shapes.parse(spaced) is None and plain_way == [spaced]


def test_blocks_of_learnt_shapes_agree_with_nats_py_whatever_their_values() -> None:
    # Values with the characters that decide whether a block is plain: blanks at either end,
    # tabs, ": ", non-ASCII, empty; and names with characters an expression must escape.
    rng = random.Random(20261203)
    parts = ["x", "1", "-", " ", "a b", ": ", "\t", "é", "\xa0", "", "*", "(", "\\", "$"]
    shape_names = [NAMES, ("A.b", "C+d", "E(f)", "G[h]"), ("X-Only",), ("Dup", "Dup")]
    shapes, agreed, read_by_shape = HeaderShapes(), 0, 0
    for _ in range(2000):
        names = rng.choice(shape_names)
        values = ["".join(rng.choices(parts, k=rng.randint(0, 3))) for _ in names]
        lines = "".join(f"{name}: {value}\r\n" for name, value in zip(names, values, strict=True))
        block = f"NATS/1.0\r\n{lines}\r\n".encode()
        learnt = shapes.shapes
        theirs = _nats_py(block)
        ours = shapes.parse(block)
        if ours is None:
            continue  # nats-py's own parser reads it on the client
        assert ours == theirs == parse_plain_headers(block), block
        agreed += 1
        read_by_shape += shapes.shapes == learnt and learnt > 0
    assert agreed > 500 and shapes.shapes >= 3, (agreed, shapes.shapes)
    assert read_by_shape > 100


def test_a_stream_of_ever_new_shapes_learns_no_more_than_eight() -> None:
    shapes = HeaderShapes()
    for i in range(100):
        block = _block("1", "2", names=(f"Name-{i}", "Other"))
        assert shapes.parse(block) == shapes.parse(block) == {f"Name-{i}": "1", "Other": "2"}
    assert shapes.shapes == 8


def test_a_shape_takes_its_names_literally() -> None:
    shapes = HeaderShapes()
    names = ("A.b", "C+d", "E(f)")
    for i in range(2):
        shapes.parse(_block(str(i), "2", "3", names=names))
    assert shapes.shapes == 1
    near = _block("1", "2", "3", names=("Axb", "CCCd", "Ef"))
    assert shapes.parse(near) == {"Axb": "1", "CCCd": "2", "Ef": "3"}
