"""Declaring options once: a dataclass field carries its default, help, environment variable and
command-line flag, and everything else (``App`` keywords, ``JSWORKER_*`` fallbacks, click
options, the checks that they agree) is derived from the fields.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping
from typing import Any

ENV_PREFIX = "JSWORKER_"


def option(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    env: str | None = None,
    flag: str | None = None,
    minimum: float | None = None,
    default_factory: Any = dataclasses.MISSING,
    repr: bool = True,
) -> Any:
    """A dataclass field with its ``help``, the ``JSWORKER_<env>`` variable it falls back to
    and the command-line ``flag`` that sets it (either may be None; a flag may have a short
    form after a space: ``"--concurrency -c"``). ``minimum`` bounds a number given as a flag."""
    metadata = {"help": help, "env": env, "flag": flag, "minimum": minimum}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata, repr=repr)
    return dataclasses.field(default=default, metadata=metadata, repr=repr)


def option_fields(cls: type) -> Iterator[dataclasses.Field[Any]]:
    """The fields of ``cls`` declared with :func:`option`."""
    for f in dataclasses.fields(cls):
        if "help" in f.metadata:
            yield f


def env_name(f: dataclasses.Field[Any]) -> str | None:
    """The environment variable of an option field, or None."""
    env = f.metadata.get("env")
    return f"{ENV_PREFIX}{env}" if env else None


def from_environment(cls: type, given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` plus, for every option of ``cls`` not in it (or None there), the value of its
    environment variable when that is set and not empty."""
    values = {k: v for k, v in given.items() if v is not None}
    for f in option_fields(cls):
        name = env_name(f)
        if f.name not in values and name is not None and os.environ.get(name):
            values[f.name] = os.environ[name]
    return values
