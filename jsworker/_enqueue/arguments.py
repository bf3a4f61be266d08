"""Task arguments checked against the task's annotations when a job is enqueued, and turned
back into the annotated types when it runs.

``def charge(amount: Decimal, when: datetime, order: Order)`` is enqueued with a
:class:`~decimal.Decimal`, a :class:`~datetime.datetime` and an ``Order`` dataclass, and runs
with the same: each annotated argument is checked (a wrong type is a ``TypeError`` naming the
parameter, and nothing is sent), encoded to JSON-ready values, and decoded to its annotation
in the worker. msgspec does the checking and converting: it knows the standard library's
types (``Decimal``, ``datetime``, ``date``, ``time``, ``timedelta``, ``UUID``, enums),
dataclasses, ``TypedDict``, ``NamedTuple``, containers and unions, and does it in about a
microsecond; ``pathlib`` paths travel as their string (``/`` separated, ``as_posix()``) and
come back as the annotated class; pydantic models, when pydantic is installed, go through
pydantic itself.

The check is made on the values as the caller gave them, and its errors name their Python
types: ``b"x"`` is not a ``str`` (although it encodes to one), nor is a ``Decimal``, and a set
is not a ``list`` (its order is arbitrary; annotate ``set[int]`` to send one).

A parameter without an annotation, annotated ``Any``, or annotated with a type neither knows
(a class of your own that is none of the above) is passed as it is, as without annotations.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import inspect
import pathlib
import re
import sys
import typing
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import msgspec.inspect
import msgspec.structs

from .._core.serializers import describe, find_unencodable


def _pydantic() -> Any:
    """pydantic, when something imported it (a model exists only then), else None: it is
    optional, and importing it here would cost every worker and CLI start ~20 ms for apps
    that use no model."""
    return sys.modules.get("pydantic")


def _is_model(kind: object) -> bool:
    found = _pydantic()
    return found is not None and isinstance(kind, type) and issubclass(kind, found.BaseModel)


def _is_path(kind: object) -> bool:
    return isinstance(kind, type) and issubclass(kind, pathlib.PurePath)


def _enc_hook(value: Any) -> Any:
    if isinstance(value, pathlib.PurePath):
        # "/" separated whatever the system: a path from a Windows producer reads the same in
        # a Linux worker (PureWindowsPath accepts "/" too).
        return value.as_posix()
    found = _pydantic()
    if found is not None and isinstance(value, found.BaseModel):
        return value.model_dump(mode="json")
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


def _dec_hook(kind: type, value: Any) -> Any:
    if _is_path(kind):
        if isinstance(value, str | pathlib.PurePath):
            return kind(value)
        raise TypeError(f"Expected `{kind.__name__}`, got `{type(value).__name__}`")
    if _is_model(kind):
        pydantic = _pydantic()
        if isinstance(value, pydantic.BaseModel):
            # model_validate would return the very instance, fields unchecked: check its data.
            value = value.model_dump(mode="json")
        try:
            return kind.model_validate(value)  # type: ignore[attr-defined]
        except pydantic.ValidationError as exc:
            first = exc.errors()[0] if exc.errors() else {"msg": str(exc), "loc": ()}
            where = ".".join(str(part) for part in first.get("loc", ()))
            raise ValueError(f"{first['msg']}{f' at {where}' if where else ''}") from None
    raise NotImplementedError(f"cannot decode {kind.__name__}")


def _types_in(node: object) -> Iterator[msgspec.inspect.Type]:
    """Every type node under ``node`` (msgspec's description of an annotation), each once:
    a recursive dataclass (``children: list[Node]``) describes itself."""
    seen: set[int] = set()
    pending = [node]
    while pending:
        item = pending.pop()
        if isinstance(item, msgspec.inspect.Field):
            pending.append(item.type)
        elif isinstance(item, tuple | list):
            pending.extend(reversed(item))
        elif isinstance(item, msgspec.inspect.Type) and id(item) not in seen:
            seen.add(id(item))
            yield item
            pending.extend(getattr(item, name) for name in reversed(item.__struct_fields__))


def _supported(annotation: Any) -> bool:
    """True when the annotation says something to check and everything in it can be converted."""
    try:
        info = msgspec.inspect.type_info(annotation)
    except (TypeError, ValueError):
        return False
    if isinstance(info, msgspec.inspect.AnyType):
        return False
    return all(
        not isinstance(t, msgspec.inspect.CustomType) or _is_model(t.cls) or _is_path(t.cls)
        for t in _types_in(info)
    )


# Values the enqueue-side check sees as themselves instead of their JSON form, so that one is
# not taken for the string it encodes to (b"x" is base64 text, a Decimal its digits) and an
# error names its type. Exact classes: msgspec passes through no subclass.
_KEPT: tuple[type, ...] = (
    bytes,
    bytearray,
    memoryview,
    datetime.datetime,
    datetime.date,
    datetime.time,
    datetime.timedelta,
    uuid.UUID,
    decimal.Decimal,
    pathlib.PurePosixPath,
    pathlib.PureWindowsPath,
    pathlib.PosixPath,
    pathlib.WindowsPath,
)
# Where such values may stay after the check (and must then be encoded once more); of custom
# types, paths only (a pydantic model is encoded by the first call already).
_KEPT_NODES = (
    msgspec.inspect.AnyType,
    msgspec.inspect.BytesType,
    msgspec.inspect.ByteArrayType,
    msgspec.inspect.MemoryViewType,
    msgspec.inspect.DateTimeType,
    msgspec.inspect.DateType,
    msgspec.inspect.TimeType,
    msgspec.inspect.TimeDeltaType,
    msgspec.inspect.UUIDType,
    msgspec.inspect.DecimalType,
)
# Annotations whose values of exactly that class need no check, only msgspec's encoding.
_LEAVES = (
    bytes,
    datetime.datetime,
    datetime.date,
    datetime.time,
    datetime.timedelta,
    uuid.UUID,
    decimal.Decimal,
)
_ARRAYS = (msgspec.inspect.ListType, msgspec.inspect.VarTupleType, msgspec.inspect.TupleType)
# Collections of one item type.
_ITEMS = (
    msgspec.inspect.ListType,
    msgspec.inspect.VarTupleType,
    msgspec.inspect.SetType,
    msgspec.inspect.FrozenSetType,
)
# Where a set is in its place.
_SET_NODES = (
    msgspec.inspect.SetType,
    msgspec.inspect.FrozenSetType,
    msgspec.inspect.AnyType,
    msgspec.inspect.CustomType,
)


def _keeps(node: msgspec.inspect.Type) -> bool:
    if isinstance(node, msgspec.inspect.CustomType):
        return _is_path(node.cls)
    return isinstance(node, _KEPT_NODES)


def _leaf(annotation: Any) -> type | None:
    if annotation in _LEAVES or (isinstance(annotation, type) and issubclass(annotation, enum.Enum)):
        return typing.cast(type, annotation)
    return None


def _array_nodes(info: msgspec.inspect.Type) -> frozenset[int]:
    """The ids of the nodes under ``info`` that lead to a list or tuple: where a set may be
    passed by mistake and must be looked for."""
    nodes = list(_types_in(info))
    return frozenset(id(n) for n in nodes if any(isinstance(t, _ARRAYS) for t in _types_in(n)))


def _find_set(node: Any, value: Any, path: str, arrays: frozenset[int]) -> tuple[str, Any] | None:
    """The msgspec-style path and value of the first set or frozenset in ``value`` where
    ``node`` wants a list or tuple (msgspec would take it for one), or None. Only the parts
    of ``value`` under nodes in ``arrays`` are looked at: nothing of a ``list[int]`` but the
    list itself."""
    while isinstance(node, msgspec.inspect.Metadata):
        node = node.type
    if isinstance(node, msgspec.inspect.UnionType):
        kinds = [t for t in node.types if not isinstance(t, msgspec.inspect.NoneType)]
        if len(kinds) == 1:
            return _find_set(kinds[0], value, path, arrays)
        # Which member of a wider union a value is meant for is msgspec's call: only a set
        # standing where the union takes an array and no set is looked at.
        plain = [t.type if isinstance(t, msgspec.inspect.Metadata) else t for t in kinds]
        takes_array = any(isinstance(t, _ARRAYS) for t in plain)
        takes_set = any(isinstance(t, _SET_NODES) for t in plain)
        wrong = isinstance(value, set | frozenset) and takes_array and not takes_set
        return (path, value) if wrong else None
    if isinstance(node, _ARRAYS) and isinstance(value, set | frozenset):
        return path, value
    for step, kind, item in _typed_parts(node, value, arrays):
        if (found := _find_set(kind, item, f"{path}{step}", arrays)) is not None:
            return found
    return None


def _typed_parts(node: Any, value: Any, arrays: frozenset[int]) -> Iterator[tuple[str, Any, Any]]:
    """The parts of ``value`` that ``node`` describes and whose nodes are in ``arrays``:
    (path step, their node, the part)."""
    if isinstance(node, msgspec.inspect.TupleType):
        if isinstance(value, list | tuple):
            yield from _positional_parts(node.item_types, value, arrays)
    elif isinstance(node, _ITEMS):
        if id(node.item_type) in arrays and isinstance(value, list | tuple | set | frozenset):
            yield from ((f"[{i}]", node.item_type, item) for i, item in enumerate(value))
    elif isinstance(node, msgspec.inspect.DictType):
        if id(node.value_type) in arrays and isinstance(value, Mapping):
            yield from (("[...]", node.value_type, item) for item in value.values())
    elif isinstance(node, msgspec.inspect.NamedTupleType) and isinstance(value, tuple):
        yield from _positional_parts([field.type for field in node.fields], value, arrays)
    else:
        yield from _field_parts(getattr(node, "fields", ()), value, arrays)


def _positional_parts(
    kinds: Iterable[Any], value: Iterable[Any], arrays: frozenset[int]
) -> Iterator[tuple[str, Any, Any]]:
    """:func:`_typed_parts` of a tuple or named tuple, whose items have a node each."""
    for i, (kind, item) in enumerate(zip(kinds, value, strict=False)):
        if id(kind) in arrays:
            yield f"[{i}]", kind, item


def _field_parts(fields: Iterable[Any], value: Any, arrays: frozenset[int]) -> Iterator[tuple[str, Any, Any]]:
    """:func:`_typed_parts` of a struct, dataclass or typed dict: its fields, read as keys of a
    mapping or as attributes of anything else; a field the value lacks has no part."""
    for field in fields:
        if id(field.type) not in arrays:
            continue
        if isinstance(value, Mapping):
            item = value.get(field.name, _MISSING)
        else:
            item = getattr(value, field.name, _MISSING)
        if item is not _MISSING:
            yield f".{field.encode_name}", field.type, item


_MISSING = object()


def positional_names(signature: inspect.Signature) -> tuple[str, ...] | None:
    """The parameter names in order when every parameter may be given by position (no
    ``*args``, ``**kwargs`` or keyword-only ones): positions then map straight to names.
    None for other signatures."""
    plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = signature.parameters.values()
    return tuple(signature.parameters) if all(p.kind in plain for p in params) else None


@dataclass(frozen=True, slots=True)
class _Param:
    name: str
    annotation: Any
    star_args: bool = False  # *args: each item is of the annotated type
    star_kwargs: bool = False  # **kwargs: each value is
    # The annotation when it is one of JSON's own scalar types: a value of exactly that type
    # needs neither encoding nor checking.
    scalar: type | None = None
    # The annotation when it is Decimal, datetime, UUID, an enum...: a value of exactly that
    # class needs no check, only its encoding.
    leaf: type | None = None
    # msgspec's description of the annotation.
    info: Any = None
    # Whether values checked against it may still hold kept values (see _KEPT) to encode.
    reencode: bool = False
    # The nodes of info where a set may stand for a list (see _find_set); empty: none.
    arrays: frozenset[int] = frozenset()


_SCALARS = (int, float, str, bool)


# Stands for an argument a workflow step is given only when it runs (see encode_after).
_LATER = object()


class TypedArguments:
    """How one task's annotated parameters are checked, encoded and decoded.

    Build it with :meth:`of`, which returns None for a function with nothing to check: then
    arguments travel as they are.
    """

    def __init__(self, task: str, signature: inspect.Signature, params: dict[str, _Param]) -> None:
        self.task = task
        self.signature = signature
        self.params = params
        self._positional = positional_names(signature)
        # For such signatures called with positions only (as every .delay(1, 2) is), decoding
        # converts the whole argument list in one call, as a struct read from a list (a third
        # of the cost: bench/README.md, "Hot-path choices").
        self._shapes: dict[int, type[msgspec.Struct]] = {}
        # When every annotated parameter of such a signature is an int, float, str or bool:
        # the type each position's value must have to be its own decoding (None where any
        # value goes). A job of ids and names then needs no call to msgspec at all.
        self._scalars = (
            tuple(params[name].scalar if name in params else None for name in self._positional)
            if self._positional is not None and all(p.scalar is not None for p in params.values())
            else None
        )

    @classmethod
    def of(cls, task: str, fn: Callable[..., Any], signature: inspect.Signature) -> TypedArguments | None:
        """The typed arguments of ``fn``, or None when no parameter has a checkable annotation."""
        try:
            hints = typing.get_type_hints(fn)
        except Exception:  # unresolvable forward references: nothing can be checked
            return None
        params = {
            name: _param(p, hints[name])
            for name, p in signature.parameters.items()
            if name in hints and _supported(hints[name])
        }
        return cls(task, signature, params) if params else None

    def encode(
        self, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``args`` and ``kwargs`` with every annotated argument checked and made JSON-ready.

        Raises ``TypeError`` naming the parameter whose value does not fit its annotation.
        The arguments must already fit the signature (count and names).
        """
        return self._convert(args, kwargs, self._encode_one)

    def encode_after(
        self, given: int, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """:meth:`encode` for the arguments of a workflow step whose first ``given`` arguments
        come only when it runs (the previous step's result): ``args`` fill the parameters
        after those."""
        if not given:
            return self.encode(args, kwargs)
        new_args, new_kwargs = self._convert((*(_LATER,) * given, *args), kwargs, self._encode_known)
        return new_args[given:], new_kwargs

    def _encode_known(self, param: _Param, value: Any) -> Any:
        return value if value is _LATER else self._encode_one(param, value)

    def decode(
        self, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Decoded job arguments turned into their annotated types; ``TypeError`` naming the
        parameter whose value cannot be. The arguments must fit the signature."""
        if not kwargs and self._positional is not None:
            scalars = self._scalars
            if scalars is not None and len(args) <= len(scalars):
                # Not strict: parameters past the arguments keep their defaults (and a keyword
                # argument costs this loop a third of its time).
                for value, kind in zip(args, scalars):  # noqa: B905
                    if kind is not None and type(value) is not kind:
                        break
                else:
                    return tuple(args), {}
            shape = self._shapes.get(len(args)) or self._shape(len(args))
            try:
                decoded = msgspec.convert(args, shape, strict=False, dec_hook=_dec_hook)
                return msgspec.structs.astuple(decoded), {}
            except msgspec.ValidationError:
                pass  # decoded again one by one below, for an error that names the parameter
        return self._convert(args, kwargs, self._decode_one)

    def _shape(self, count: int) -> type[msgspec.Struct]:
        assert self._positional is not None
        fields = [
            (n, self.params[n].annotation if n in self.params else Any) for n in self._positional[:count]
        ]
        shape = msgspec.defstruct("Arguments", fields, array_like=True)
        self._shapes[count] = shape
        return shape

    def _encode_one(self, param: _Param, value: Any) -> Any:
        kind = type(value)
        if kind is param.scalar:
            # Most annotations are int or str: no call to msgspec for those (bench/README.md,
            # "Hot-path choices").
            return value
        if kind is param.leaf:
            # A Decimal for a Decimal, an enum member for its enum: one call instead of two.
            return msgspec.to_builtins(value)
        try:
            kept = msgspec.to_builtins(value, builtin_types=_KEPT, enc_hook=_enc_hook)
        except (TypeError, ValueError, NotImplementedError) as exc:
            raise self._error(param, self._unencodable(param, value, exc)) from None
        if param.arrays and (found := _find_set(param.info, value, "$", param.arrays)) is not None:
            where, got = found
            at = "" if where == "$" else f" - at `{where}`"
            raise self._error(
                param,
                f"Expected `array`, got `{type(got).__name__}`{at} (a set has no order: pass a "
                "list, or annotate set[...] to send a set)",
            )
        # Checked on what is sent, strictly: a "7" for an int is refused, not coerced.
        self._check(param, kept, strict=True, given=value)
        return msgspec.to_builtins(kept, enc_hook=_enc_hook) if param.reencode else kept

    def _unencodable(self, param: _Param, value: Any, exc: Exception) -> str:
        def encodes(part: Any) -> bool:
            try:
                msgspec.to_builtins(part, enc_hook=_enc_hook)
            except (TypeError, ValueError, NotImplementedError):
                return False
            return True

        path, how, culprit = find_unencodable(value, encodes, objects=True)
        if type(culprit).__name__ not in str(exc):
            return f"cannot be encoded: {exc}"  # not a value of a type msgspec does not know
        return describe("", param.name, path, how, culprit) + ", which cannot be encoded as JSON"

    def _decode_one(self, param: _Param, value: Any) -> Any:
        # Not strict: JSON object keys arrive as strings ({1: "a"} is sent as {"1": "a"}).
        return self._check(param, value, strict=False)

    def _check(self, param: _Param, value: Any, *, strict: bool, given: Any = _MISSING) -> Any:
        try:
            return msgspec.convert(value, param.annotation, strict=strict, dec_hook=_dec_hook)
        except msgspec.ValidationError as exc:
            detail = str(exc)
            if given is not _MISSING:
                detail = _python_types(detail, given)
            raise self._error(param, detail) from None

    def _error(self, param: _Param, detail: str) -> TypeError:
        return TypeError(f"task {self.task}: argument {param.name!r} ({_name(param.annotation)}): {detail}")

    def _convert(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], one: Callable[[_Param, Any], Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        params = self.params
        if self._positional is not None:
            names = self._positional
            new_args = tuple(
                one(params[names[i]], value) if names[i] in params else value for i, value in enumerate(args)
            )
            new_kwargs = {k: one(params[k], v) if k in params else v for k, v in kwargs.items()}
            return new_args, new_kwargs
        bound = self.signature.bind(*args, **kwargs)
        for name, value in bound.arguments.items():
            param = params.get(name)
            if param is None:
                continue
            if param.star_args:
                bound.arguments[name] = tuple(one(param, item) for item in value)
            elif param.star_kwargs:
                bound.arguments[name] = {k: one(param, v) for k, v in value.items()}
            else:
                bound.arguments[name] = one(param, value)
        return tuple(bound.args), dict(bound.kwargs)


def _param(parameter: inspect.Parameter, annotation: Any) -> _Param:
    """How the annotated ``parameter`` is checked, encoded and decoded."""
    info = msgspec.inspect.type_info(annotation)
    return _Param(
        parameter.name,
        annotation,
        star_args=parameter.kind is inspect.Parameter.VAR_POSITIONAL,
        star_kwargs=parameter.kind is inspect.Parameter.VAR_KEYWORD,
        scalar=annotation if annotation in _SCALARS else None,
        leaf=_leaf(annotation),
        info=info,
        reencode=any(_keeps(t) for t in _types_in(info)),
        arrays=_array_nodes(info),
    )


# msgspec's "got `array`" names what the value was encoded to; errors name the value's class.
_GOT = re.compile(r"got `([^`]+)`(?: - at `key` in `([^`]*)`| - at `([^`]*)`)?$")
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[\.\.\.\]")
_JSON_NAMES = {
    str: "str",
    int: "int",
    bool: "bool",
    float: "float",
    type(None): "null",
    list: "array",
    tuple: "array",
    dict: "object",
}
_KEPT_NAMES = {
    bytes: "bytes",
    bytearray: "bytes",
    memoryview: "bytes",
    datetime.datetime: "datetime",
    datetime.date: "date",
    datetime.time: "time",
    datetime.timedelta: "duration",
    uuid.UUID: "uuid",
    decimal.Decimal: "decimal",
}


def _python_types(detail: str, given: Any) -> str:
    """msgspec's message with the class of the value at fault in place of the JSON type it
    names, when the path leads to values of one class only (``[...]``, any key or value of a
    dict, may lead to several)."""
    match = _GOT.search(detail)
    if match is None:
        return detail
    got, key_at, at = match.groups()
    found = _resolve(given, key_at or at or "$", keys=key_at is not None)
    names = {type(v).__name__ for v in found if _msgspec_name(v) == got}
    if len(names) != 1:
        return detail
    return f"{detail[: match.start(1)]}{names.pop()}{detail[match.end(1) :]}"


def _msgspec_name(value: Any) -> str | None:
    """How msgspec names ``value`` once the check's encoding made it plain."""
    try:
        plain = msgspec.to_builtins(value, builtin_types=_KEPT, enc_hook=_enc_hook)
    except (TypeError, ValueError, NotImplementedError):
        return None
    kind = type(plain)
    return _JSON_NAMES.get(kind) or _KEPT_NAMES.get(kind) or kind.__name__


def _resolve(value: Any, path: str, *, keys: bool = False) -> list[Any]:
    """The values of ``value`` at a msgspec path (``$.lines[0].qty``, ``$[...]``); with
    ``keys``, the keys of the dicts there."""
    found = [value]
    for step in _STEP.finditer(path):
        name, index = step.groups()
        after: list[Any] = []
        for item in found:
            if name is not None:
                part = (
                    item.get(name, _MISSING) if isinstance(item, Mapping) else getattr(item, name, _MISSING)
                )
                if part is not _MISSING:
                    after.append(part)
            elif index is not None:
                if isinstance(item, list | tuple | set | frozenset) and int(index) < len(item):
                    after.append(list(item)[int(index)])
            elif isinstance(item, Mapping):
                after.extend(item.keys())
                after.extend(item.values())
        found = after
    if keys:
        return [key for item in found if isinstance(item, Mapping) for key in item]
    return found


def _name(annotation: Any) -> str:
    return annotation.__name__ if isinstance(annotation, type) else str(annotation).replace("typing.", "")
