"""Task arguments checked against the task's annotations when a job is enqueued, and turned
back into the annotated types when it runs.

``def charge(amount: Decimal, when: datetime, order: Order)`` is enqueued with a
:class:`~decimal.Decimal`, a :class:`~datetime.datetime` and an ``Order`` dataclass, and runs
with the same: each annotated argument is checked (a wrong type is a ``TypeError`` naming the
parameter, and nothing is sent), encoded to JSON-ready values, and decoded to its annotation
in the worker. msgspec does the checking and converting: it knows the standard library's
types (``Decimal``, ``datetime``, ``date``, ``time``, ``timedelta``, ``UUID``, enums),
dataclasses, ``TypedDict``, ``NamedTuple``, containers and unions, and does it in about a
microsecond; pydantic models, when pydantic is installed, go through pydantic itself.

A parameter without an annotation, annotated ``Any``, or annotated with a type neither knows
(a class of your own that is none of the above) is passed as it is, as without annotations.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import msgspec.inspect
import msgspec.structs

try:  # pydantic is optional: its models are supported when it is installed
    import pydantic
except ImportError:  # pragma: no cover - exercised in environments without pydantic
    pydantic = None  # type: ignore[assignment]


def _is_model(kind: object) -> bool:
    return pydantic is not None and isinstance(kind, type) and issubclass(kind, pydantic.BaseModel)


def _enc_hook(value: Any) -> Any:
    if pydantic is not None and isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


def _dec_hook(kind: type, value: Any) -> Any:
    if _is_model(kind):
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
    """Every type node under ``node`` (msgspec's description of an annotation)."""
    if isinstance(node, msgspec.inspect.Type):
        yield node
        for name in getattr(node, "__struct_fields__", ()):
            yield from _types_in(getattr(node, name))
    elif isinstance(node, msgspec.inspect.Field):
        yield from _types_in(node.type)
    elif isinstance(node, tuple | list):
        for item in node:
            yield from _types_in(item)


def _supported(annotation: Any) -> bool:
    """True when the annotation says something to check and everything in it can be converted."""
    try:
        info = msgspec.inspect.type_info(annotation)
    except (TypeError, ValueError):
        return False
    if isinstance(info, msgspec.inspect.AnyType):
        return False
    return all(not isinstance(t, msgspec.inspect.CustomType) or _is_model(t.cls) for t in _types_in(info))


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


_SCALARS = (int, float, str, bool)


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
        # converts the whole argument list in one call, as a struct read from a list: 0.5 us
        # per job instead of 1.4 us for a one-parameter task.
        self._shapes: dict[int, type[msgspec.Struct]] = {}

    @classmethod
    def of(cls, task: str, fn: Callable[..., Any], signature: inspect.Signature) -> TypedArguments | None:
        """The typed arguments of ``fn``, or None when no parameter has a checkable annotation."""
        try:
            hints = typing.get_type_hints(fn)
        except Exception:  # unresolvable forward references: nothing can be checked
            return None
        params = {
            name: _Param(
                name,
                hints[name],
                star_args=p.kind is inspect.Parameter.VAR_POSITIONAL,
                star_kwargs=p.kind is inspect.Parameter.VAR_KEYWORD,
                scalar=hints[name] if hints[name] in _SCALARS else None,
            )
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

    def decode(
        self, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Decoded job arguments turned into their annotated types; ``TypeError`` naming the
        parameter whose value cannot be. The arguments must fit the signature."""
        if not kwargs and self._positional is not None:
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
        if type(value) is param.scalar:
            # Most annotations are int or str: 0.1 us instead of 1.2 us for msgspec's two calls.
            return value
        try:
            plain = msgspec.to_builtins(value, enc_hook=_enc_hook)
        except (TypeError, ValueError, NotImplementedError) as exc:
            raise self._error(param, f"cannot be encoded: {exc}") from None
        # Checked on what is sent, strictly: a "7" for an int is refused, not coerced.
        self._check(param, plain, strict=True)
        return plain

    def _decode_one(self, param: _Param, value: Any) -> Any:
        # Not strict: JSON object keys arrive as strings ({1: "a"} is sent as {"1": "a"}).
        return self._check(param, value, strict=False)

    def _check(self, param: _Param, value: Any, *, strict: bool) -> Any:
        try:
            return msgspec.convert(value, param.annotation, strict=strict, dec_hook=_dec_hook)
        except msgspec.ValidationError as exc:
            raise self._error(param, str(exc)) from None

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


def _name(annotation: Any) -> str:
    return annotation.__name__ if isinstance(annotation, type) else str(annotation).replace("typing.", "")
