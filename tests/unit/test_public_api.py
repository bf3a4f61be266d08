"""What `import jsworker` offers: every exception a user can meet, and the live workers."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys

import pytest

import jsworker
import jsworker._errors
import jsworker._registry.entries
from jsworker import JsworkerError, TaskControl, WorkerEntry, live_workers

# Exceptions that never leave the module that raises them: their callers catch them (or, for
# the stand-ins of a process task's exception, turn them into the job's outcome).
INTERNAL = {
    "NobodyAnswered": "jsworker.jetstream.service",  # a question no worker listens to
    "SubjectMoved": "jsworker.jetstream.stored",  # a compare-and-set write that lost
    "BatchConflict": "jsworker.jetstream.atomic",  # an atomic batch whose write was made before
    "TLSNotOfferedError": "jsworker.jetstream.client",  # a connect attempt, then ConnectError
    "TaskProcessError": "jsworker._runtime.processes",  # what a process task raised, in the worker
    "ResultError": "jsworker._runtime.processes",
    "RemoteTraceback": "jsworker._runtime.processes",  # the text cause of the above
    "ForgedStep": "jsworker.workflows._trust",  # a dead letter's error, never raised to a caller
}
# Public exceptions not defined in jsworker._errors yet: the command line's loader still defines
# its own; once it imports it from errors.py, this is empty.
ELSEWHERE = {"AppNotFound": "jsworker._cli.loader"}


# What `from jsworker import ...` offers, sorted. A name added to or removed from the package's
# __all__ is a change of the public API: make it here too, on purpose.
PUBLIC = [
    "Admin",
    "ApiError",
    "App",
    "AppNotFound",
    "BadRowError",
    "ConfigurationError",
    "ConnectError",
    "ConsumeError",
    "DeadLetterNotFound",
    "DeadLetterNotReplayable",
    "EnqueueError",
    "EventsNotFound",
    "HistoryError",
    "JSONSerializer",
    "Job",
    "JobCancelled",
    "JobContext",
    "JobError",
    "JobExpired",
    "JobFailed",
    "JobNotFound",
    "JobState",
    "JobStatus",
    "JobTimeout",
    "JsworkerError",
    "LimitsStreamError",
    "Middleware",
    "NoStreamError",
    "NoWorkerRunning",
    "OutgoingJob",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "PortInUseError",
    "ProcessExited",
    "ProvisioningNeeded",
    "RefusedError",
    "Reject",
    "Retry",
    "ScheduleNotFound",
    "ScheduleRefused",
    "Schedules",
    "SchedulesRefused",
    "SerializationError",
    "Serializer",
    "ServerNotFoundError",
    "ServerStartError",
    "ServerVersionError",
    "Settled",
    "Snooze",
    "StalledError",
    "StartupError",
    "StreamNotFoundError",
    "StreamRequestError",
    "SubjectTaken",
    "Task",
    "TaskControl",
    "TopologyError",
    "UnsupportedColumnError",
    "WorkerEntry",
    "WorkflowFailed",
    "WriteRefused",
    "__version__",
    "add_job_context",
    "current_job",
    "live_workers",
]


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
        if getattr(jsworker, name, None) is not cls or name not in jsworker.__all__:
            missing.append(f"{cls.__module__}.{name}")
    assert missing == [], "export these from jsworker/__init__.py (or list them in INTERNAL, saying why)"


def test_public_exceptions_are_one_tree_in_errors() -> None:
    """Every exported exception is defined in jsworker._errors (but those of :data:`ELSEWHERE`)
    and derives from JsworkerError, or is a task's control signal."""
    defined = _defined_exceptions()
    for name in jsworker.__all__:
        obj = getattr(jsworker, name)
        if not (inspect.isclass(obj) and issubclass(obj, BaseException)):
            continue
        assert obj.__module__ == ELSEWHERE.get(name, "jsworker._errors"), name
        assert issubclass(obj, JsworkerError | TaskControl), name
        assert defined[name] is obj
    for name, module in ELSEWHERE.items():
        assert defined[name].__module__ == module, "moved to errors.py: drop it from ELSEWHERE"


def test_exceptions_moved_to_errors_keep_their_old_import_locations() -> None:
    """Code importing an exception from the module that used to define it keeps working."""
    moved = {
        "jsworker._deadletters.letter": ["DeadLetterNotFound", "DeadLetterNotReplayable"],
        "jsworker.events._reader": ["EventsNotFound"],
        "jsworker.jetstream.api": ["ApiError", "StreamRequestError"],
        "jsworker.jetstream.consume": ["ConsumeError"],
        "jsworker.jetstream.history": ["HistoryError"],
        "jsworker.jetstream.limits_stream": ["LimitsStreamError", "StreamNotFoundError"],
        "jsworker.jetstream.message": ["NoStreamError", "PayloadTooLargeError"],
        "jsworker.jetstream.pipeline": ["RefusedError", "StalledError"],
        "jsworker.jetstream.publish": ["SubjectTaken"],
        "jsworker.jetstream.stored": ["WriteRefused"],
        "jsworker._runtime.processes": ["ProcessExited"],
        "jsworker._scheduling.periodic": ["ScheduleNotFound", "ScheduleRefused", "SchedulesRefused"],
        "jsworker._server": ["PortInUseError", "ServerNotFoundError", "ServerStartError"],
        "jsworker._server.binary": ["ServerNotFoundError"],
        "jsworker._server.process": ["PortInUseError", "ServerStartError"],
        "jsworker.spark": ["BadRowError", "UnsupportedColumnError"],
        "jsworker.spark._jobs": ["BadRowError"],
        "jsworker.spark._schema": ["UnsupportedColumnError"],
    }
    for module, names in moved.items():
        for name in names:
            assert getattr(importlib.import_module(module), name) is getattr(jsworker._errors, name)


def test_errors_imports_nothing_from_jsworker() -> None:
    """Any module may import jsworker._errors without a cycle."""
    tree = ast.parse(inspect.getsource(jsworker._errors))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith("jsworker"), ast.unparse(node)
        elif isinstance(node, ast.Import):
            assert not any(alias.name.startswith("jsworker") for alias in node.names), ast.unparse(node)


def test_only_plain_exceptions_that_never_reach_a_caller_are_left_out() -> None:
    """An error jsworker raises (a JsworkerError) is always exported; the list of internal
    ones names real classes."""
    defined = _defined_exceptions()
    for name, module in INTERNAL.items():
        assert defined[name].__module__ == module
        assert not issubclass(defined[name], JsworkerError), name
        assert not hasattr(jsworker, name)


def test_importing_jsworker_leaves_the_heavier_modules_of_lazy_exports_unloaded() -> None:
    """The exceptions of the process pool, local server and readers live in jsworker._errors,
    and the command line's is imported on first use: `import jsworker` loads none of those
    modules for them."""
    code = (
        "import sys, jsworker\n"
        "heavy = ['jsworker._cli', 'jsworker._runtime.processes', 'jsworker._server.process',\n"
        "         'jsworker._deadletters.letter', 'jsworker.events._reader', 'jsworker.spark']\n"
        "print([m for m in heavy if m in sys.modules])\n"
        "assert jsworker.PortInUseError.__module__ == 'jsworker._errors'\n"
        "from jsworker import AppNotFound, ProcessExited\n"
        "print('jsworker._cli.loader' in sys.modules, 'PortInUseError' in dir(jsworker))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["[]", "True True"]


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    assert not hasattr(jsworker, "NoSuchThing")


def test_live_workers_and_their_entries_are_public() -> None:
    assert live_workers is jsworker._registry.entries.live_workers
    assert WorkerEntry is jsworker._registry.entries.WorkerEntry
    assert {"live_workers", "WorkerEntry"} <= set(jsworker.__all__)
    assert inspect.iscoroutinefunction(live_workers)
    assert "jsworker workers" in (live_workers.__doc__ or "")
    assert list(inspect.signature(live_workers).parameters) == ["app", "conn"]


def test_the_public_names_are_exactly_these() -> None:
    added = sorted(set(jsworker.__all__) - set(PUBLIC))
    removed = sorted(set(PUBLIC) - set(jsworker.__all__))
    assert (added, removed) == ([], []), "a public name changed: update PUBLIC in this test on purpose"
    assert jsworker.__all__ == sorted(set(jsworker.__all__)), "__all__ is kept sorted, each name once"


def test_every_public_name_resolves() -> None:
    """Each name of __all__ is there, the lazily imported ones too, in a fresh interpreter."""
    code = "from jsworker import *\nimport jsworker\nprint(all(n in globals() for n in jsworker.__all__))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out == "True\n"
    for name in jsworker.__all__:
        assert getattr(jsworker, name) is not None, name


def test_every_public_name_has_a_docstring() -> None:
    undocumented = []
    for name in jsworker.__all__:
        obj = getattr(jsworker, name)
        if isinstance(obj, str):  # __version__
            continue
        # A class's own docstring, not one inherited from its base.
        doc = vars(obj).get("__doc__") if inspect.isclass(obj) else obj.__doc__
        if not (doc or "").strip():
            undocumented.append(name)
    assert undocumented == []
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", jsworker.__version__)


# The modules a user imports: the package, and the documented sub-modules (docs/reference/api.md).
PUBLIC_MODULES = {
    "jsworker",
    "jsworker.__main__",
    "jsworker.admin",
    "jsworker.contrib",
    "jsworker.contrib.otel",
    "jsworker.events",
    "jsworker.spark",
    "jsworker.spark.analytics",
    "jsworker.testing",
    "jsworker.ui",
    "jsworker.workflows",
}


# Private all the same, under the name the layering gives them: jetstream/, the only code that
# talks to NATS, is named so wherever the layers are spoken of.
PRIVATE_BY_LAYER = ("jsworker.jetstream",)


def test_every_other_module_is_marked_private() -> None:
    """A module outside PUBLIC_MODULES has a name part that starts with an underscore (or is in
    a layer of PRIVATE_BY_LAYER): what a user may import is the package and its documented
    sub-modules."""
    names = {info.name for info in pkgutil.walk_packages(jsworker.__path__, "jsworker.")} | {"jsworker"}
    unmarked = sorted(
        name
        for name in names - PUBLIC_MODULES
        if not any(part.startswith("_") for part in name.split(".")[1:])
        and not any(name == layer or name.startswith(layer + ".") for layer in PRIVATE_BY_LAYER)
    )
    assert unmarked == []
    assert names >= PUBLIC_MODULES


@pytest.mark.parametrize(
    ("module", "advice"),
    [
        ("jsworker.errors", "import its names from jsworker"),
        ("jsworker.runtime.worker", "import its names from jsworker"),
        ("jsworker.status", "import QueueStatus from jsworker.admin"),
        ("jsworker.events.export", "import its names from jsworker.events"),
        ("jsworker.workflows.definition", "import its names from jsworker.workflows"),
        ("jsworker.testing.pytest_plugin", "loads by itself"),
    ],
)
def test_a_module_of_an_earlier_release_names_the_new_home(module: str, advice: str) -> None:
    with pytest.raises(ModuleNotFoundError, match=f"is not a public module.*{advice}") as raised:
        importlib.import_module(module)
    # Named as the import system met it: the first part of the name that is gone.
    assert raised.value.name is not None and module.startswith(raised.value.name)
    with pytest.raises(ModuleNotFoundError, match=r"No module named 'jsworker\.never_was'"):
        importlib.import_module("jsworker.never_was")
