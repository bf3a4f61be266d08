"""Return values typed like arguments: a task annotated ``-> Decimal`` (or a ``date``, a
dataclass, a pydantic model, a list of those) keeps its result as JSON-ready values, and
:meth:`Job.aresult <jsworker.Job.aresult>` gives it back as the annotated type.

Without this, a kept result went to the app's serializer as it was, and JSON refused a
``Decimal`` or a dataclass: the job was dead-lettered after it had done its work. The same
conversions as for arguments (see :mod:`.arguments`) apply, so a chain passes a step's typed
result on to a next step annotated with the same type.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

import msgspec

from .arguments import _dec_hook, _enc_hook, _supported

# Values every serializer takes as they are: no conversion, no call (most results are these).
_PLAIN = (int, float, str, bool, type(None))


class TypedResult:
    """How one task's return value is encoded for keeping and decoded for its caller."""

    __slots__ = ("annotation",)

    def __init__(self, annotation: Any) -> None:
        self.annotation = annotation

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> TypedResult | None:
        """The typed result of ``fn``, or None when its return annotation says nothing to
        convert (none, ``Any``, a class of its own, or one that cannot be resolved)."""
        try:
            annotation = typing.get_type_hints(fn).get("return", Any)
        except Exception:  # unresolvable forward references: kept as returned
            return None
        if annotation in _PLAIN or not _supported(annotation):
            return None
        return cls(annotation)

    def encode(self, value: Any) -> Any:
        """``value`` made JSON-ready (``TypeError`` when it holds what cannot be)."""
        if type(value) in _PLAIN:
            return value
        try:
            return msgspec.to_builtins(value, enc_hook=_enc_hook)
        except (NotImplementedError, ValueError) as exc:
            raise TypeError(str(exc)) from None

    def decode(self, value: Any) -> Any:
        """A kept value turned back into the annotation; ``TypeError`` naming both when it does
        not fit (a result kept before the task's annotation changed)."""
        try:
            return msgspec.convert(value, self.annotation, strict=False, dec_hook=_dec_hook)
        except (msgspec.ValidationError, NotImplementedError, ValueError) as exc:
            raise TypeError(f"the kept result does not fit the task's return annotation: {exc}") from None
