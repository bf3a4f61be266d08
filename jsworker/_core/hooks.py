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

from .._errors import ConfigurationError
from .._wire.names import validate_name
from .job_status import JobStatus
from .middleware import Middleware, MiddlewareChain
from .options import AppOptions

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


class HookDeclarations:
    """The App's ways to declare its hooks: middleware added later, worker start and stop
    hooks, final-state handlers."""

    hooks: Hooks
    options: AppOptions
    middleware: MiddlewareChain

    def add_middleware(self, *middleware: Middleware) -> None:
        """Add ``middleware`` after the app's own: innermost around a run, the last to see an
        enqueue. For a layout where the middleware's module imports the app (or its tasks), so
        that the app cannot be made with it. Enqueues from now on go through it, and so do the
        jobs of workers that start after (add it at import time, as tasks are declared)."""
        self.middleware = MiddlewareChain([*self.middleware, *middleware])

    def on_startup(self, fn: H) -> H:
        """Run ``fn`` (sync or async, no arguments) once in each worker process before its
        first job, after the connection is up; keep what it opens on :attr:`state`. One that
        raises stops the worker (exit code 1) and the hooks after it do not run."""
        self.hooks.startup.append(fn)
        return fn

    def on_shutdown(self, fn: H) -> H:
        """Run ``fn`` (sync or async, no arguments) once in each worker process after its
        last job settled, when its start hooks all ran; one that raises is logged and the
        others still run."""
        self.hooks.shutdown.append(fn)
        return fn

    def on_final_state(self, name: str) -> Callable[[F], F]:
        """Declare a final-state handler named ``name`` (``@app.on_final_state("tracking")``):
        ``jsworker run`` calls it with the :class:`JobStatus` of each job that ended
        (succeeded, failed, cancelled or expired), wherever it ended: a cancel in a producer, an
        expiry, a worker killed right after its ack. It needs ``App(final_states=True)``.

        At least once: the workers share one durable consumer a handler, so a restarted fleet
        goes on where it stopped, and a handler that raises hears that job again later. Make
        it idempotent (an upsert by ``status.id``). See docs/middleware.md, "Final states a
        table can rely on".
        """
        if not self.options.final_states:
            raise ConfigurationError(
                f"on_final_state({name!r}) needs App(final_states=True): only then does every job "
                "get a record of its final state before its ack"
            )
        validate_name("final-state handler", name)
        if name in self.hooks.final_states:
            raise ConfigurationError(f"a final-state handler named {name!r} is declared already")

        def declare(fn: F) -> F:
            self.hooks.final_states[name] = fn
            return fn

        return declare
