"""Worker start and stop hooks, the state they share with tasks, and final-state handlers.

``@app.on_startup`` functions run once per worker process before its first job (each
process of ``--processes``), ``@app.on_shutdown`` functions once after its last job settled.
What a start hook opens (a database pool, an HTTP client) goes on ``app.state``, where tasks
read it and the stop hook closes it: one per worker process, with no module global built
lazily on first use.

``@app.on_final_state(name)`` handlers hear each job's final state from the server, at least
once, wherever the job ended (see :mod:`jsworker._lifecycle.finals`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .job_status import JobStatus

T = TypeVar("T")

#: A start or stop hook: a function of no arguments, sync or async.
Hook = Callable[[], Awaitable[None] | None]
H = TypeVar("H", bound=Hook)
#: A final-state handler: a function of the job's final status, sync or async.
FinalStateHandler = Callable[[JobStatus], Awaitable[None] | None]
F = TypeVar("F", bound=FinalStateHandler)


class Hooks:
    """The start and stop hooks of an app, in the order they were declared, and its
    final-state handlers by name."""

    def __init__(self) -> None:
        self.startup: list[Hook] = []
        self.shutdown: list[Hook] = []
        self.final_states: dict[str, FinalStateHandler] = {}


class State:
    """What the app's start hooks keep for its tasks, as attributes (``app.state.db = ...``).

    Each worker process has its own: a start hook runs in every process. Reading a name no
    hook has set raises AttributeError saying so; :meth:`get` also checks the type, for
    typed code.
    """

    def __getattr__(self, name: str) -> Any:
        # Only called for names that are not set.
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"app.state has no {name!r}: set it in an @app.on_startup hook (it runs in each "
            "worker process before its first job)"
        )

    def __setattr__(self, name: str, value: Any) -> None:
        # Declared for type checkers: any name may be set.
        object.__setattr__(self, name, value)

    def get(self, name: str, kind: type[T]) -> T:
        """The value named ``name``, checked to be a ``kind`` (TypeError otherwise)."""
        value = getattr(self, name)
        if not isinstance(value, kind):
            raise TypeError(f"app.state.{name} is a {type(value).__name__}, not a {kind.__name__}")
        return value

    def __repr__(self) -> str:
        return f"<State {', '.join(sorted(vars(self)))}>"
