"""``python -m jsworker ...`` processes started from one that has already imported jsworker.

The suite starts hundreds of ``jsworker`` processes (workers, and commands whose output a test
reads). Each fresh interpreter spent about 0.4 s of CPU importing jsworker and what it uses
before doing anything, on a machine whose two cores the whole suite keeps busy. Here a template
process per test process imports that once and forks a child per command: the child takes the
command's environment, working directory, ``sys.path`` and standard streams, then runs
``jsworker/__main__.py`` as ``python -m jsworker`` would, exits as it would (its threads
joined, its ``atexit`` handlers run) and is a process of its own with its own pid, stopped by
pid like any other. The template itself only forks: it never starts a thread or an event loop,
so a child starts with nothing held.

Tests about how a process starts (the console script, ``--reload``, the deployment files) start
real interpreters, as users do.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import runpy
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, Protocol

ROOT = Path(__file__).resolve().parent.parent


# -- the template process --------------------------------------------------------------------


def _base_path() -> list[str]:
    """``sys.path`` without what this process's own script directory and PYTHONPATH added."""
    own = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    own.add(os.path.dirname(os.path.abspath(__file__)))
    return [p for p in sys.path if p and os.path.abspath(p) not in own]


def _become(request: Mapping[str, Any], base_path: list[str]) -> None:
    """In the forked child: take the command's place, as a fresh ``python -m jsworker`` would."""
    os.chdir(request["cwd"])
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(out, 1)
    err = (
        out
        if request["stderr"] == request["stdout"]
        else os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    )
    os.dup2(err, 2)
    os.closerange(3, 1 << 16)  # the template's pipes and selector, as Popen's close_fds
    os.environ.clear()
    os.environ.update(request["env"])
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [request["cwd"], *extra, *base_path]
    sys.argv[:] = [str(Path(sys.modules["jsworker"].__file__ or "").parent / "__main__.py"), *request["argv"]]
    import importlib
    import random
    import warnings

    importlib.invalidate_caches()  # modules written since the template started
    random.seed()  # not the template's sequence, shared by every child
    if request["env"].get("PYTHONWARNINGS"):
        # Read by an interpreter as it starts, which this child did not: applied as it would be.
        warnings._processoptions(request["env"]["PYTHONWARNINGS"].split(","))  # type: ignore[attr-defined]


def _command_code() -> int:
    """Run ``python -m jsworker`` in this process; its exit code, as the interpreter derives it."""
    try:
        runpy.run_module("jsworker", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        sys.stderr.write(f"{exc.code}\n")
        return 1
    except KeyboardInterrupt:
        return -signal.SIGINT
    except BaseException:
        sys.excepthook(*sys.exc_info())
        return 1
    return 0


def _exit(code: int) -> NoReturn:
    """End the child as the interpreter ends: its other threads joined, its ``atexit``
    handlers run, its streams flushed. Not the teardown of every module that follows, which
    only frees memory: in a child sharing the template's pages, that alone took 0.1 s of CPU,
    copying each page it touched."""
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if code == -signal.SIGINT:
        # As an interpreter whose program ended on Ctrl-C: killed by the signal.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


def serve() -> None:
    """The template: reads one JSON request per line on stdin, answers on stdout (``pid`` once
    the child runs, ``status`` once it has exited), until stdin closes."""
    import jsworker._cli  # noqa: F401  (what every child would otherwise import itself)

    base_path = _base_path()
    # What is imported now stays out of every child's garbage collections, which would
    # otherwise walk (and so copy) the template's pages.
    gc.freeze()
    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    answers = os.dup(1)
    children: dict[int, tuple[int, int]] = {}  # pidfd -> (request id, pid)
    selector = selectors.DefaultSelector()
    selector.register(requests, selectors.EVENT_READ)
    pending = b""

    def answer(**fields: Any) -> None:
        os.write(answers, json.dumps(fields).encode() + b"\n")

    while True:
        for key, _ in selector.select():
            if key.fileobj is requests:
                chunk = os.read(requests.fileno(), 65536)
                if not chunk:
                    return  # the test process is gone
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    request = json.loads(line)
                    pid = os.fork()
                    if pid == 0:
                        selector.close()
                        _become(request, base_path)
                        _exit(_command_code())
                    pidfd = os.pidfd_open(pid)
                    children[pidfd] = (request["id"], pid)
                    selector.register(pidfd, selectors.EVENT_READ)
                    answer(id=request["id"], pid=pid)
            else:
                pidfd = key.fd
                selector.unregister(pidfd)
                ask, pid = children.pop(pidfd)
                _, status = os.waitpid(pid, 0)
                os.close(pidfd)
                answer(id=ask, status=os.waitstatus_to_exitcode(status))


# -- the test process's side -----------------------------------------------------------------


class _Slot:
    def __init__(self) -> None:
        self.pid: int | None = None
        self.started = threading.Event()
        self.returncode: int | None = None
        self.ended = threading.Event()


class _Template:
    """The template process of this test process, started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._slots: dict[int, _Slot] = {}
        self._next = 0

    def _started(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
            self._proc = subprocess.Popen(
                [sys.executable, "-c", "from tests.launcher import serve; serve()"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                cwd=ROOT,
            )
            threading.Thread(target=self._read, args=(self._proc,), daemon=True).start()
        return self._proc

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            answer = json.loads(line)
            with self._lock:
                slot = self._slots[answer["id"]]
                if "pid" in answer:
                    slot.pid = answer["pid"]
                    slot.started.set()
                else:
                    slot.returncode = answer["status"]
                    del self._slots[answer["id"]]
                    slot.ended.set()
        # The template ended (this process is exiting, or it crashed): nothing more will answer.
        with self._lock:
            for slot in self._slots.values():
                slot.started.set()
                slot.ended.set()
            self._slots.clear()

    def start(self, request: dict[str, Any]) -> _Slot:
        with self._lock:
            proc = self._started()
            self._next += 1
            slot = self._slots[self._next] = _Slot()
            assert proc.stdin is not None
            proc.stdin.write(json.dumps({"id": self._next, **request}).encode() + b"\n")
            proc.stdin.flush()
        if not slot.started.wait(30) or slot.pid is None:
            raise RuntimeError("the process template did not start the command")
        return slot


_TEMPLATE = _Template()


class Process(Protocol):
    """What the tests do with a process they started: a :class:`subprocess.Popen` or a
    :class:`Launched`."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


class Launched:
    """A started ``jsworker`` command: the part of :class:`subprocess.Popen` the tests use."""

    def __init__(self, args: Sequence[str], slot: _Slot) -> None:
        self.args = list(args)
        self._slot = slot
        assert slot.pid is not None
        self.pid: int = slot.pid

    @property
    def returncode(self) -> int | None:
        """The exit code (``-N`` for a signal), None while it runs."""
        return self._slot.returncode if self._slot.ended.is_set() else None

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._slot.ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        if self._slot.returncode is None:
            raise RuntimeError(f"the process template ended before {self.pid} did")
        return self._slot.returncode

    def send_signal(self, sig: int) -> None:
        if not self._slot.ended.is_set():
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _launch(
    args: Sequence[str], env: Mapping[str, str], cwd: Path | None, stdout: Path, stderr: Path
) -> Launched:
    request = {
        "argv": list(args),
        "env": dict(env),
        "cwd": str(cwd or Path.cwd()),
        "stdout": str(stdout),
        "stderr": str(stderr),
    }
    return Launched(["jsworker", *args], _TEMPLATE.start(request))


def start(args: Sequence[str], *, env: Mapping[str, str], stdout: Path, cwd: Path | None = None) -> Launched:
    """``python -m jsworker ARGS`` with ``env`` as its whole environment and its output (both
    streams) appended to ``stdout``; standard input is empty."""
    stdout.open("ab").close()  # there once this returns, as a file Popen is given would be
    return _launch(args, env, cwd, stdout, stdout)


def run(
    args: Sequence[str], *, env: Mapping[str, str], timeout: float, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m jsworker ARGS`` to its end, its output captured as ``subprocess.run`` with
    ``capture_output=True, text=True`` would; killed and :class:`subprocess.TimeoutExpired`
    after ``timeout`` seconds."""
    with tempfile.TemporaryDirectory(prefix="jsworker-cmd-") as tmp:
        out, err = Path(tmp, "out"), Path(tmp, "err")
        proc = _launch(args, env, cwd, out, err)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        return subprocess.CompletedProcess(
            proc.args,
            code,
            out.read_text(errors="replace") if out.exists() else "",
            err.read_text(errors="replace") if err.exists() else "",
        )
