"""The pool of task processes a worker runs ``executor="process"`` tasks in (see
:mod:`.processes` for what crosses to them and back): up to N processes, started on first
need, kept for the next job, replaced as their recycling says, and a slot held for a job before
its run (see :mod:`.interceptors.task_processes`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any

from .._core.serializers import Serializer
from .._errors import ProcessExited
from .._observability.logging import get_logger
from .limiter import Limiter
from .processes import BOOTSTRAP, STARTED, ProcessCall, Raised, Returned, unpack
from .recycling import Recycling

log = get_logger("jsworker.worker")


class _Process:
    """One task process, its pipes, and the thread that hands what it sends to the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        their_requests, requests = os.pipe()
        replies, their_replies = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", BOOTSTRAP, str(their_requests), str(their_replies)],
                pass_fds=(their_requests, their_replies),
                stdin=subprocess.DEVNULL,
            )
        finally:
            os.close(their_requests)  # the process holds these now; closed here, its exit is an EOF
            os.close(their_replies)
        self.requests = Connection(requests, readable=False)
        self.replies = Connection(replies, writable=False)
        self.requests.send(sys.path)
        self._loop = loop
        self.inbox: asyncio.Queue[object] = asyncio.Queue()
        #: Set (by the reading thread) once the process has closed its end: it has exited.
        self.gone = False
        #: Jobs it ran to their end.
        self.jobs = 0
        threading.Thread(target=self._read, name=f"jsworker-task-{self.pid}", daemon=True).start()

    @property
    def pid(self) -> int:
        """The process's id."""
        return self.process.pid

    async def call(self, call: ProcessCall, timeout: float | None) -> Returned | Raised:
        """Send ``call`` and wait for its answer; TimeoutError after ``timeout`` seconds of its
        run, ProcessExited when the process ends first."""
        try:
            self.requests.send(call)
        except OSError as exc:
            raise ProcessExited(self._exit_text()) from exc
        answer = await self.inbox.get()
        if answer == STARTED:
            if timeout is None:
                answer = await self.inbox.get()
            else:
                async with asyncio.timeout(timeout):
                    answer = await self.inbox.get()
        if isinstance(answer, Returned | Raised):
            return answer
        raise ProcessExited(self._exit_text())

    def stop(self) -> None:
        """Kill the process, whatever it is doing."""
        self.process.kill()

    def retire(self) -> None:
        """Let an idle process end: it exits when it reads the end of its pipe."""
        self.requests.close()

    def _read(self) -> None:
        while True:
            try:
                message: object = self.replies.recv()
            except (EOFError, OSError):
                break
            self._post(message)
        self.gone = True
        self.process.wait()  # reaped here, off the event loop
        self.replies.close()
        self._post(None)

    def _post(self, message: object) -> None:
        # A closed loop (RuntimeError): nobody waits for this process any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self.inbox.put_nowait, message)

    def _exit_text(self) -> str:
        code = self.process.returncode
        how = f"exited with code {code}"
        if code is None or code < 0:
            how = "is gone" if code is None else f"was killed by {signal.Signals(-code).name}"
        return f"the task's process (pid {self.pid}) {how} before the call returned"


class ProcessRunner:
    """Up to ``processes`` processes that run process tasks for one event loop."""

    def __init__(self, processes: int, recycling: Recycling | None = None) -> None:
        if processes < 1:
            raise ValueError("processes must be >= 1")
        self.processes = processes
        self._recycling = recycling
        self._slots: Limiter[None] = Limiter(processes)
        # Jobs that hold a slot before their run comes (see reserve).
        self._reserved: set[object] = set()
        self._idle: list[_Process] = []
        self._busy: set[_Process] = set()

    def try_reserve(self, owner: object) -> bool:
        """Hold a slot for ``owner``'s run if one is free now; True if held."""
        if self._slots.try_acquire():
            self._reserved.add(owner)
            return True
        return False

    async def reserve(self, owner: object) -> None:
        """Wait for a free slot and hold it for ``owner``'s run (:meth:`run` with ``owner``)."""
        await self._slots.acquire()
        self._reserved.add(owner)

    def release(self, owner: object) -> None:
        """Give back the slot held for ``owner`` if its run did not take it."""
        if owner in self._reserved:
            self._reserved.discard(owner)
            self._slots.release()

    async def run(
        self, call: ProcessCall, timeout: float | None, serializer: Serializer, owner: object = None
    ) -> Any:
        """Run ``call`` in a process (in the slot held for ``owner``, else the next free one)
        and return (or raise, as a stand-in) what its function did.

        TimeoutError when the call ran longer than ``timeout`` seconds, ProcessExited when its
        process ended first; the process is killed on a timeout and on cancellation.
        """
        if owner is not None and owner in self._reserved:
            self._reserved.discard(owner)
        else:
            await self._slots.acquire()
        try:
            process = self._take()
            self._busy.add(process)
            answer: Returned | Raised | None = None
            try:
                answer = await process.call(call, timeout)
            finally:
                self._busy.discard(process)
                if answer is not None:
                    self._done(process)
                elif not process.gone:
                    log.info("task_process.killed", pid=process.pid, task=call.task)
                    process.stop()
        finally:
            self._slots.release()
        return unpack(answer, call.content_type, serializer)

    def _done(self, process: _Process) -> None:
        """Take ``process`` back after a job: idle again, or replaced when its limits say."""
        process.jobs += 1
        why = self._recycling.due(process.jobs, process.pid) if self._recycling is not None else None
        if why is None:
            self._idle.append(process)
            return
        log.info("task_process.recycled", pid=process.pid, reason=why, jobs=process.jobs)
        process.retire()

    def close(self) -> None:
        """End the processes: idle ones at the end of their pipe, busy ones killed."""
        for process in self._idle:
            process.retire()
        for process in self._busy:
            process.stop()
        self._idle.clear()

    def _take(self) -> _Process:
        while self._idle:
            process = self._idle.pop()
            if not process.gone:
                return process
        process = _Process(asyncio.get_running_loop())
        log.debug("task_process.started", pid=process.pid)
        return process
