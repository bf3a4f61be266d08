"""Job bodies: encoding call arguments and decoding (possibly hostile) bytes."""

from __future__ import annotations

import dataclasses
import inspect
import json
import pathlib
from typing import Any

import pytest

from jsworker._core.serializers import JSONSerializer, Serializer, decode_call, encode_call
from jsworker._errors import SerializationError

S = JSONSerializer()


def test_json_serializer_satisfies_protocol() -> None:
    """JSONSerializer is a Serializer with the JSON content type."""
    assert isinstance(S, Serializer)
    assert S.content_type == "application/json"


def test_round_trip_preserves_args_and_kwargs() -> None:
    """What encode_call writes, decode_call reads back (tuples become lists)."""
    args = (1, "two", [3.5, None], {"nested": True})
    kwargs = {"x": "\u00e9t\u00e9", "y": [1, 2]}
    body = encode_call(S, args, kwargs)
    assert decode_call(S, body) == (list(args), kwargs)


def test_encoding_is_compact_utf8_json() -> None:
    """The body is compact JSON with 'args' and 'kwargs' keys."""
    body = encode_call(S, (1,), {"k": "v"})
    assert body == b'{"args":[1],"kwargs":{"k":"v"}}'


class _Thing:
    pass


@pytest.mark.parametrize(
    ("value", "culprit"),
    [
        ({1, 2}, "set"),
        (_Thing(), "_Thing"),
        (float("nan"), "out of range float"),
        (float("inf"), "out of range float"),
    ],
)
def test_encode_call_names_the_problem(value: Any, culprit: str) -> None:
    """Values JSON cannot hold raise SerializationError whose message names the culprit."""
    with pytest.raises(SerializationError) as info:
        encode_call(S, (value,), {})
    message = str(info.value)
    assert culprit.lower() in message.lower()
    assert "application/json" in message
    assert isinstance(info.value.__cause__, TypeError | ValueError)


def test_encode_call_rejects_bad_kwarg_values_too() -> None:
    """A non-JSON value in kwargs is caught like one in args."""
    with pytest.raises(SerializationError, match="set"):
        encode_call(S, (), {"tags": {"a"}})


@pytest.mark.parametrize("body", [b"[1, 2]", b'"text"', b"42", b"null", b"true"])
def test_decode_call_rejects_non_object_bodies(body: bytes) -> None:
    """A JSON body that is not an object is a SerializationError."""
    with pytest.raises(SerializationError, match="not an object"):
        decode_call(S, body)


@pytest.mark.parametrize("body", [b"\xff\xfe\x00garbage", b"{not json", b"", b'{"args": [1]'])
def test_decode_call_rejects_undecodable_bytes(body: bytes) -> None:
    """Bad UTF-8 and malformed JSON become SerializationError, not a raw decoder error."""
    with pytest.raises(SerializationError, match="undecodable"):
        decode_call(S, body)


@pytest.mark.parametrize(
    "envelope",
    [
        {"args": {"a": 1}, "kwargs": {}},
        {"args": "abc", "kwargs": {}},
        {"args": None},
        {"args": [], "kwargs": [1]},
        {"args": [], "kwargs": None},
        {"kwargs": "x"},
    ],
)
def test_decode_call_rejects_wrong_shapes(envelope: dict[str, Any]) -> None:
    """'args' must be a list and 'kwargs' an object."""
    with pytest.raises(SerializationError, match="must be a list"):
        decode_call(S, json.dumps(envelope).encode())


class _IntKeys:
    content_type = "application/x-test"

    def dumps(self, obj: Any) -> bytes:
        return b""

    def loads(self, data: bytes) -> Any:
        return {"args": [], "kwargs": {1: "a", "ok": "b"}}


def test_decode_call_rejects_non_string_kwarg_keys() -> None:
    """A serializer producing non-string kwargs keys is refused (they could not be **kwargs)."""
    with pytest.raises(SerializationError, match="keys must be strings"):
        decode_call(_IntKeys(), b"whatever")


class _Exploding:
    content_type = "application/x-boom"

    def dumps(self, obj: Any) -> bytes:
        raise TypeError("cannot")

    def loads(self, data: bytes) -> Any:
        raise RuntimeError("decoder blew up")


def test_decode_call_wraps_any_decoder_exception() -> None:
    """Whatever a plugged-in decoder raises becomes SerializationError naming its content type."""
    with pytest.raises(SerializationError, match="application/x-boom") as info:
        decode_call(_Exploding(), b"x")
    assert isinstance(info.value.__cause__, RuntimeError)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"{}", ([], {})),
        (b'{"args":[1,2]}', ([1, 2], {})),
        (b'{"kwargs":{"a":1}}', ([], {"a": 1})),
    ],
)
def test_decode_call_accepts_missing_args_or_kwargs(body: bytes, expected: tuple[Any, Any]) -> None:
    """Missing 'args' means no positional arguments and missing 'kwargs' no keyword ones."""
    assert decode_call(S, body) == expected


@pytest.mark.parametrize(
    "body",
    [
        b' {"args":[1],"kwargs":{"k":"v"}}\n',  # whitespace around the object
        '{"args":[1],"kwargs":{"k":"v"}}'.encode("utf-8-sig"),
        '{"args":[1],"kwargs":{"k":"v"}}'.encode("utf-16"),
    ],
)
def test_decode_call_accepts_what_json_accepts(body: bytes) -> None:
    """Bodies that are not compact UTF-8 JSON still decode as json.loads would."""
    assert decode_call(S, body) == ([1], {"k": "v"})


@pytest.mark.parametrize(
    "body",
    [
        b'{"args":[1,-2.5,"x\\u00e9",true,null,{"a":[1]}],"kwargs":{"k":"v"}}',
        b'{"args":[123456789012345678901234567890,1e2,1.0e400,-0.0],"kwargs":{}}',
        b'{"args":[NaN,Infinity,-Infinity],"kwargs":{}}',
        b'{"args":["\\ud800"],"kwargs":{"k":1,"k":2}}',
    ],
)
def test_json_bodies_decode_to_what_the_standard_decoder_gives(body: bytes) -> None:
    """Big ints, floats past the range, NaN, lone surrogates and repeated keys: the values the
    standard json module gives, whichever decoder read them."""
    expected = json.loads(body)
    decoded = S.loads(body)
    assert repr(decoded) == repr(expected)
    assert [type(v) for v in decoded["args"]] == [type(v) for v in expected["args"]]


@pytest.mark.parametrize("body", [b'{"args":[],"kwargs":{}}x', b'{"args":[],"kwargs":{}}{}'])
def test_decode_call_rejects_trailing_data(body: bytes) -> None:
    """A valid object followed by anything else is not a job body."""
    with pytest.raises(SerializationError):
        decode_call(S, body)


def test_plain_ints_and_none_encode_as_the_encoder_does() -> None:
    """The shortcut for ints and None gives the encoder's bytes; subclasses go the long way."""
    import enum

    class Level(enum.IntEnum):
        HIGH = 3

    for value in (0, -7, 10**40, None, True, False, Level.HIGH, 2.5, "x"):
        assert S.dumps(value) == json.dumps(value, separators=(",", ":")).encode(), value


@dataclasses.dataclass
class _Doc:
    source: pathlib.Path


def _task(doc, tags=(), *more, **options):  # type: ignore[no-untyped-def]
    """A signature to name arguments by."""


@pytest.mark.parametrize(
    ("args", "kwargs", "signature", "where"),
    [
        (({"a": [1, {2}]},), {}, None, "args[0]['a'][1] has type set"),
        ((1,), {"doc": _Doc(pathlib.Path("/a"))}, None, "kwargs['doc'] has type _Doc"),
        ((1, [1.5, float("nan")]), {}, None, "args[1][1] is nan"),
        (({(1, 2): "x"},), {}, None, "a key of args[0] has type tuple"),
        ((_Doc(pathlib.Path("/a")),), {}, inspect.signature(_task), "argument 'doc' has type _Doc"),
        ((1, [{"k": {1}}]), {}, inspect.signature(_task), "argument 'tags': tags[0]['k'] has type set"),
        ((1, (), 2, _Thing()), {}, inspect.signature(_task), "argument 'more': more[1] has type _Thing"),
        (
            (1,),
            {"x": {b"k": 1}},
            inspect.signature(_task),
            "argument 'options': a key of options['x'] has type bytes",
        ),
    ],
)
def test_encode_call_says_where_the_culprit_is_and_its_type(
    args: tuple[Any, ...], kwargs: dict[str, Any], signature: inspect.Signature | None, where: str
) -> None:
    """Not only "Object of type X is not JSON serializable": which argument, where inside it,
    and (given the task's signature) which parameter."""
    with pytest.raises(SerializationError) as info:
        encode_call(S, args, kwargs, signature=signature)
    assert f"cannot encode job arguments with application/json: {where} (" in str(info.value)


def test_a_value_holding_itself_is_named_without_looping() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    with pytest.raises(SerializationError, match=r"args\[0\]\[1\] has type list \(Circular reference"):
        encode_call(S, (loop,), {})
