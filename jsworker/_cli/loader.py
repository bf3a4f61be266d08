"""Finding the App that ``jsworker run MODULE[:ATTR]`` names."""

from __future__ import annotations

import importlib
import os
import sys

from .._app import App
from .._errors import JsworkerError

_MISSING = object()


class AppNotFound(JsworkerError):
    """The module could not be imported, or holds no (or more than one) App."""


def load_app(spec: str) -> App:
    """Import ``MODULE[:ATTR]`` and return its App.

    Without ``ATTR`` the module must hold exactly one App at top level. The current directory
    is put on ``sys.path`` first, as ``python -m`` would, so ``jsworker run app.tasks`` works
    from a project root.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name:
        raise AppNotFound(f"no module in {spec!r}; expected MODULE or MODULE:ATTR")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise AppNotFound(f"cannot import module {module_name!r}: no module named {exc.name!r}") from exc
        raise AppNotFound(f"importing {module_name!r} failed: {exc}") from exc
    except Exception as exc:
        raise AppNotFound(f"importing {module_name!r} failed: {type(exc).__name__}: {exc}") from exc
    apps = {name: value for name, value in vars(module).items() if isinstance(value, App)}
    if attr:
        found = getattr(module, attr, _MISSING)
        if isinstance(found, App):
            return found
        has = f"; its Apps: {', '.join(sorted(apps))}" if apps else "; it has no App"
        if found is _MISSING:
            raise AppNotFound(f"module {module_name!r} has no attribute {attr!r}{has}")
        raise AppNotFound(f"{module_name}:{attr} is a {type(found).__name__}, not a jsworker App{has}")
    if not apps:
        raise AppNotFound(
            f"module {module_name!r} has no jsworker App; define one or name it as {module_name}:ATTR"
        )
    if len(apps) > 1:
        names = ", ".join(sorted(apps))
        raise AppNotFound(
            f"module {module_name!r} has several Apps ({names}); name one as {module_name}:ATTR"
        )
    return next(iter(apps.values()))
