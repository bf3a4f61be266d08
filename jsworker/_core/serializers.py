"""How job arguments become message bodies.

The default is JSON. Any object with ``content_type``, ``dumps`` and ``loads`` can replace it
(``App(serializer=...)``); pickle is never used unless an app plugs it in itself, because a
worker that unpickles can be made to run anything by whoever can publish to its subjects.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Callable, Iterator
from typing import Any, Protocol, runtime_checkable

import msgspec

from .._errors import SerializationError


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
    # A fourth of the standard decoder's cost per body, and the same values for any JSON it
    # accepts; what it refuses (NaN, lone surrogates, numbers past a float) takes the
    # standard decoder's way, which accepts or explains it as before.
    _fast = msgspec.json.Decoder()

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
        try:
            return self._fast.decode(data)
        except msgspec.MsgspecError:
            pass
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


def encode_call(
    serializer: Serializer,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    signature: inspect.Signature | None = None,
) -> bytes:
    """Encode a call's arguments as a job body, naming the culprit when it cannot be done.

    The :class:`SerializationError` names the first value the serializer cannot encode, where
    it is and its type (``args[0]['when'] has type datetime``). Given the task's
    ``signature``, positional arguments are named by their parameter (``argument 'when'``);
    it is only read when encoding fails.
    """
    try:
        return serializer.dumps({"args": list(args), "kwargs": kwargs})
    except (TypeError, ValueError, OverflowError) as exc:
        where = _culprit(serializer, args, kwargs, signature)
        raise SerializationError(
            f"cannot encode job arguments with {serializer.content_type}: "
            + (f"{where} ({exc})" if where else str(exc))
        ) from exc


def _culprit(
    serializer: Serializer, args: tuple[Any, ...], kwargs: dict[str, Any], signature: inspect.Signature | None
) -> str:
    """``<where> has type <T>`` for the first argument ``serializer`` cannot encode ("" when
    each one alone can be: then it is the envelope that cannot)."""

    def encodes(value: Any) -> bool:
        try:
            serializer.dumps(value)
        except Exception:  # what a plugged-in serializer raises is its own business
            return False
        return True

    named: list[tuple[str, str, Any]]  # (label, root of the path, value)
    bound = None
    if signature is not None:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            bound = None  # arguments that do not fit: named by position below
    if bound is not None:
        named = [(f"argument {name!r}", name, value) for name, value in bound.arguments.items()]
    else:
        named = [("", f"args[{i}]", value) for i, value in enumerate(args)]
        named += [("", f"kwargs[{key!r}]", value) for key, value in kwargs.items()]
    for label, root, value in named:
        if encodes(value):
            continue
        # Only JSON's own containers are searched: the serializer refused a dataclass (or
        # any other object) as a whole, whatever its fields hold.
        return describe(label, root, *find_unencodable(value, encodes, objects=False))
    return ""


def describe(label: str, root: str, path: str, how: str, value: Any) -> str:
    """How an error names a value found by :func:`find_unencodable` under ``root``:
    ``argument 'doc': doc.source has type PosixPath``, ``args[0] has type set``."""
    where = f"{root}{path}"
    if how:
        where = f"{how} of {where}"
    what = f"is {value!r}" if isinstance(value, float) else f"has type {type(value).__name__}"
    if label and where == root:
        return f"{label} {what}"
    return f"{label}: {where} {what}" if label else f"{where} {what}"


def find_unencodable(value: Any, encodes: Callable[[Any], bool], *, objects: bool) -> tuple[str, str, Any]:
    """Where in ``value`` (which ``encodes`` refuses) the refused part is: ``(path, how,
    culprit)``, the path a Python expression's tail (``.source``, ``['k'][2]``) and ``how``
    ``"a key"`` or ``"an item"`` when the culprit is a dict key or a set member, else "".

    The search goes down into lists, tuples, sets and dicts, and with ``objects`` into
    dataclasses and msgspec structs too (which msgspec encodes field by field), through the
    first part ``encodes`` refuses; the culprit is the deepest refused value none of whose
    parts is refused. Used on error paths only: it encodes every part it passes.
    """
    path: list[str] = []
    enclosing: set[int] = set()
    while True:
        enclosing.add(id(value))
        for step, how, part in _parts(value, objects):
            if how == "a key":
                if not encodes({part: None}):
                    return "".join(path), how, part
                continue
            if encodes(part):
                continue
            if how:
                return "".join(path), how, part  # a set member: no path goes further
            if id(part) in enclosing:
                return "".join([*path, step]), "", part  # a value that holds itself
            path.append(step)
            value = part
            break
        else:
            return "".join(path), "", value


def _parts(value: Any, objects: bool) -> Iterator[tuple[str, str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield "", "a key", key
            yield f"[{key!r}]", "", item
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield f"[{i}]", "", item
    elif isinstance(value, set | frozenset):
        for item in value:
            yield "", "an item", item
    elif objects and dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield f".{field.name}", "", getattr(value, field.name)
    elif objects and hasattr(type(value), "__struct_fields__"):
        for name in type(value).__struct_fields__:
            yield f".{name}", "", getattr(value, name)


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
