"""How job arguments become message bodies.

The default is JSON. Any object with ``content_type``, ``dumps`` and ``loads`` can replace it
(``App(serializer=...)``); pickle is never used unless an app plugs it in itself, because a
worker that unpickles can be made to run anything by whoever can publish to its subjects.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, runtime_checkable

from .errors import SerializationError


@runtime_checkable
class Serializer(Protocol):
    """Turns a job's ``{"args": [...], "kwargs": {...}}`` envelope into bytes and back."""

    content_type: str

    def dumps(self, obj: Any) -> bytes:
        """Encode ``obj``; raise on values the format cannot hold."""
        ...

    def loads(self, data: bytes) -> Any:
        """Decode bytes made by :meth:`dumps`; raise on anything else."""
        ...


class JSONSerializer:
    """Compact UTF-8 JSON; rejects NaN and values JSON cannot represent."""

    content_type = "application/json"
    # json.dumps builds a new encoder per call whenever an option differs from the defaults.
    _encoder = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
    _decoder = json.JSONDecoder()

    def dumps(self, obj: Any) -> bytes:
        """Encode ``obj`` as compact JSON."""
        # Plain ints and None, what many tasks return, without the encoder's machinery.
        if obj is None:
            return b"null"
        if type(obj) is int:
            return b"%d" % obj
        return self._encoder.encode(obj).encode()

    def loads(self, data: bytes) -> Any:
        """Decode JSON bytes."""
        # json.loads on bytes sniffs the encoding and strips whitespace in Python code, which
        # costs three times the decoding itself; bodies made by dumps() take the direct path.
        try:
            text = data.decode()
            value, end = self._decoder.raw_decode(text)
            if end == len(text):
                return value
        except ValueError:
            pass
        # Whitespace, UTF-16/32 or malformed JSON: the standard path accepts or explains it.
        return json.loads(data)


def encode_call(serializer: Serializer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """Encode a call's arguments as a job body, naming the culprit when it cannot be done."""
    try:
        return serializer.dumps({"args": list(args), "kwargs": kwargs})
    except (TypeError, ValueError, OverflowError) as exc:
        raise SerializationError(
            f"cannot encode job arguments with {serializer.content_type}: {exc}"
        ) from exc


def decode_call(serializer: Serializer, body: bytes) -> tuple[list[Any], dict[str, Any]]:
    """Decode a job body into ``(args, kwargs)``; any malformation is a SerializationError."""
    try:
        envelope = serializer.loads(body)
    except Exception as exc:  # a decoder may raise anything on hostile bytes
        raise SerializationError(f"undecodable job body ({serializer.content_type}): {exc}") from exc
    if not isinstance(envelope, dict):
        raise SerializationError("job body is not an object with 'args' and 'kwargs'")
    args = envelope.get("args", [])
    kwargs = envelope.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise SerializationError("job body 'args' must be a list and 'kwargs' an object")
    if kwargs and not all(isinstance(key, str) for key in kwargs):
        raise SerializationError("job body 'kwargs' keys must be strings")
    return args, kwargs
