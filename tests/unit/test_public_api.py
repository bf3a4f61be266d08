"""What `import jsworker` offers: every exception a user can meet, and the live workers."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys

import jsworker
import jsworker.fleet.registry
from jsworker import JsworkerError, WorkerEntry, live_workers

# Exceptions that never leave the module that raises them: their callers catch them (or, for
# the stand-ins of a process task's exception, turn them into the job's outcome).
INTERNAL = {
    "NobodyAnswered": "jsworker.jetstream.service",  # a question no worker listens to
    "SubjectMoved": "jsworker.jetstream.stored",  # a compare-and-set write that lost
    "TLSNotOfferedError": "jsworker.jetstream.client",  # a connect attempt, then ConnectError
    "TaskProcessError": "jsworker.runtime.processes",  # what a process task raised, in the worker
    "ResultError": "jsworker.runtime.processes",
    "RemoteTraceback": "jsworker.runtime.processes",  # the text cause of the above
}
# The optional Spark support (pip install 'jsworker[spark]') exports its own.
OPTIONAL = "jsworker.spark"


def _defined_exceptions() -> dict[str, type[BaseException]]:
    """Every public exception class defined in a jsworker module, by name."""
    found: dict[str, type[BaseException]] = {}
    for module_info in pkgutil.walk_packages(jsworker.__path__, "jsworker."):
        if module_info.name.endswith("__main__"):
            continue
        module = importlib.import_module(module_info.name)
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
                and not name.startswith("_")
            ):
                assert found.setdefault(name, obj) is obj, f"two exceptions named {name}"
    return found


def test_every_public_exception_is_importable_from_jsworker() -> None:
    defined = _defined_exceptions()
    assert {"ScheduleNotFound", "SchedulesRefused", "PermissionDeniedError", "JobNotFound"} <= set(defined)
    missing = []
    for name, cls in sorted(defined.items()):
        if name in INTERNAL:
            continue
        if cls.__module__.startswith(OPTIONAL):
            assert getattr(importlib.import_module(OPTIONAL), name) is cls
            continue
        if getattr(jsworker, name, None) is not cls or name not in jsworker.__all__:
            missing.append(f"{cls.__module__}.{name}")
    assert missing == [], "export these from jsworker/__init__.py (or list them in INTERNAL, saying why)"


def test_only_plain_exceptions_that_never_reach_a_caller_are_left_out() -> None:
    """An error jsworker raises (a JsworkerError) is always exported; the list of internal
    ones names real classes."""
    defined = _defined_exceptions()
    for name, module in INTERNAL.items():
        assert defined[name].__module__ == module
        assert not issubclass(defined[name], JsworkerError), name
        assert not hasattr(jsworker, name)


def test_importing_jsworker_leaves_the_heavier_modules_of_lazy_exports_unloaded() -> None:
    """The exceptions of the command line, process pool, local server and readers are
    imported on first use, so `import jsworker` costs no more for them."""
    code = (
        "import sys, jsworker\n"
        "heavy = ['jsworker.cli', 'jsworker.runtime.processes', 'jsworker.server.process',\n"
        "         'jsworker.deadletters.letter', 'jsworker.events.reader', 'jsworker.spark']\n"
        "print([m for m in heavy if m in sys.modules])\n"
        "assert jsworker.PortInUseError.__module__ == 'jsworker.server.process'\n"
        "from jsworker import AppNotFound, ProcessExited\n"
        "print('jsworker.cli.loader' in sys.modules, 'PortInUseError' in dir(jsworker))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["[]", "True True"]


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    assert not hasattr(jsworker, "NoSuchThing")


def test_live_workers_and_their_entries_are_public() -> None:
    assert live_workers is jsworker.fleet.registry.live_workers
    assert WorkerEntry is jsworker.fleet.registry.WorkerEntry
    assert {"live_workers", "WorkerEntry"} <= set(jsworker.__all__)
    assert inspect.iscoroutinefunction(live_workers)
    assert "jsworker workers" in (live_workers.__doc__ or "")
    assert list(inspect.signature(live_workers).parameters) == ["app", "conn"]
