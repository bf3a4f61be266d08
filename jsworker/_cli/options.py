"""Command-line flags made from option fields (:func:`jsworker._config.option`), so a flag and
the setting it sets cannot drift apart."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import click

from .._config import option_fields

F = TypeVar("F", bound=Callable[..., Any])


def flag_fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    """The option fields of ``cls`` that have a flag, in declaration order."""
    return tuple(f for f in option_fields(cls) if f.metadata.get("flag"))


def options_from(cls: type, *, defaults: bool = True) -> Callable[[F], F]:
    """A decorator adding a click option for every flagged field of ``cls``.

    Values arrive as keyword arguments named after the fields. With ``defaults`` the field's
    default is the flag's (shown in ``--help``); without, a flag left out arrives as None so
    that it changes nothing.
    """
    hints = typing.get_type_hints(cls)

    def decorate(command: F) -> F:
        for f in reversed(flag_fields(cls)):
            default = f.default if defaults and f.default is not dataclasses.MISSING else None
            command = click.option(
                *f.metadata["flag"].split(),
                f.name,
                type=_click_type(hints[f.name], f.metadata.get("minimum")),
                default=default,
                show_default=default is not None,
                help=f.metadata["help"],
            )(command)
        return command

    return decorate


def _click_type(hint: Any, minimum: float | None) -> click.ParamType[Any]:
    # Optional[X] is X on the command line: a flag left out is the None.
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
        hint = args[0]
    if hint is bool:
        return click.BOOL
    if hint is int:
        return click.IntRange(min=None if minimum is None else int(minimum))
    if hint is float:
        return click.FloatRange(min=minimum)
    return click.STRING
