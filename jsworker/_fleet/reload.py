"""Watching the app's source for ``jsworker run --reload`` (development).

The watching is watchfiles' (OS file events, with its own debouncing); this module only hands
the changed paths to the supervisor, which restarts its processes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from .._errors import ConfigurationError


class ReloadWatcher:
    """Watches ``roots`` for changed Python files in a thread of its own."""

    def __init__(self, roots: Sequence[Path]) -> None:
        try:
            import watchfiles
        except ImportError as exc:
            raise ConfigurationError("--reload needs watchfiles: pip install 'jsworker[reload]'") from exc
        self._watchfiles = watchfiles
        self.roots = [str(r) for r in roots]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._changed: list[str] = []
        self._thread: threading.Thread | None = None

    def start(self, wake: Callable[[], None]) -> None:
        """Start watching; ``wake()`` is called (from the watching thread) after changes."""

        def watch() -> None:
            for changes in self._watchfiles.watch(
                *self.roots, watch_filter=self._watchfiles.PythonFilter(), stop_event=self._stop
            ):
                with self._lock:
                    self._changed.extend(sorted({path for _, path in changes}))
                wake()

        self._thread = threading.Thread(target=watch, name="jsworker-reload", daemon=True)
        self._thread.start()

    def take(self) -> list[str]:
        """The paths changed since the last call."""
        with self._lock:
            changed, self._changed = self._changed, []
        return changed

    def stop(self) -> None:
        """Stop watching."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
