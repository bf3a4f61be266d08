"""The supervisor of ``jsworker run --processes N``: N worker processes on one machine.

It holds no NATS connection and no jobs; it starts the processes (spawned, never forked from a
process with threads), replaces one that dies, recycles, or must load changed code, forwards
SIGTERM/SIGINT, and serves the fleet's merged metrics.

* A process that exits without being asked to is started again after 1, 2, 4 ... up to 30
  seconds (the delay starts over once a process stayed up for a minute).
* A process that fails before it is ready, while no process of the fleet has ever been ready,
  means the app cannot start (a bad import, a wrong flag, no server): the supervisor stops the
  others and exits 1 with the cause, instead of restarting forever. With ``--reload`` it waits
  for the next change instead.
* The first SIGTERM or SIGINT is sent on to every process, which drain within ``--grace``; the
  supervisor exits 0 once all have exited cleanly. A second signal is sent on too: "now".
* A process whose worker has ended (it says so on its channel, after its last job: see
  :class:`~.channel.Kind`) has :data:`EXIT_DEADLINE` seconds to exit; a process asked to stop
  has ``--grace`` + 15 s. Past its deadline it is killed with every process it started (its
  process group, and any descendant that left the group), logged (``fleet.process_killed``)
  and counted. A retiring process (recycled, or reloaded) is replaced as soon as its worker
  has ended, not once it has exited; a process that had stopped cleanly before it had to be
  killed counts as stopped cleanly, for the exit code too.
* A process that ended by itself (killed by the kernel for its memory, a segfault, a
  ``kill -9``) takes what is left of its process group with it (a process pool's processes,
  which would go on computing under init): killed, and logged (``fleet.orphans_killed``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from .._observability.logging import get_logger
from .channel import Kind, decode
from .kill import kill_group_left, kill_tree
from .metrics import FleetMetrics
from .reload import ReloadWatcher

log = get_logger("jsworker.fleet")

_MAX_BACKOFF = 30.0
# A process that stayed up this long is not crash-looping: its next restart waits 1 s again.
_STABLE_AFTER = 60.0
# After the grace period, the time processes get to hand their jobs back before they are killed.
_STOP_MARGIN = 15.0
#: How long a process whose worker has ended (its jobs settled or handed back) gets to exit.
#: An interpreter's exit takes well under a second; one that waits for something it holds (a
#: non-daemon thread, a process pool's processes) may never end, and is killed.
EXIT_DEADLINE = 5.0

#: Starts one worker process: ``target(spec, index, connection)``.
Target = Callable[[Any, int, Connection], None]


@dataclass(eq=False)
class _Slot:
    index: int
    process: BaseProcess | None = None
    conn: Connection | None = None
    started_at: float = 0.0
    ready: bool = False
    failure: str | None = None  # what the process said when it could not start
    retiring: str | None = None  # why it is stopping to be replaced
    replacing: bool = False  # asked to stop for new code
    restart_at: float | None = None
    crashes: int = 0
    waiting_for_change: bool = False
    exiting: int | None = None  # the exit code it said it exits with, once its worker ended
    exit_by: float | None = None  # when it is killed if it has not exited (it said it exits)
    stop_by: float | None = None  # when it is killed if it has not stopped (it was asked to)
    killed: str | None = None  # why it was killed: "exit" or "stop"


class Supervisor:
    """Runs ``processes`` worker processes until stopped; :meth:`run` returns the exit code."""

    def __init__(
        self,
        target: Target,
        spec: Any,
        processes: int,
        *,
        grace: float,
        registry: CollectorRegistry | None = None,
        reload: ReloadWatcher | None = None,
    ) -> None:
        self._target = target
        self._spec = spec
        self._slots = [_Slot(i) for i in range(processes)]
        self._grace = grace
        self._ctx = get_context("spawn")
        self.metrics = FleetMetrics()
        self._restarts: Counter | None = None
        self._kills: Counter | None = None
        if registry is not None:
            registry.register(self.metrics)
            self._restarts = Counter(
                "jsworker_worker_restarts",
                "Worker processes the supervisor started again (reason: crash, jobs, memory, reload).",
                ("reason",),
                registry=registry,
            )
            for reason in ("crash", "jobs", "memory", "reload"):
                self._restarts.labels(reason)
            self._kills = Counter(
                "jsworker_worker_kills",
                "Worker processes the supervisor killed (reason: exit, still running "
                f"{EXIT_DEADLINE:g} s after its worker ended; stop, not stopped within grace + "
                f"{_STOP_MARGIN:g} s).",
                ("reason",),
                registry=registry,
            )
            for reason in ("exit", "stop"):
                self._kills.labels(reason)
        self._reload = reload
        self._wake_r, self._wake_w = socket.socketpair()
        self._signals = 0
        self._signals_handled = 0
        self._stopping = False
        # Processes replaced already, their worker ended: each has until its exit_by to exit.
        self._leaving: list[_Slot] = []
        self._ever_ready = False
        self._code = 0
        #: Why the fleet gave up (the app cannot start), for the command to print.
        self.failure: str | None = None

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> int:
        """Start the processes and supervise them until they have all stopped."""
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        previous = signal.set_wakeup_fd(self._wake_w.fileno())
        handlers = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        if self._reload is not None:
            self._reload.start(self._wake)
        try:
            log.info("fleet.started", processes=len(self._slots), pid=os.getpid())
            for slot in self._slots:
                self._start(slot)
            while self._watched() or not self._stopping:
                self._step()
        finally:
            if self._reload is not None:
                self._reload.stop()
            signal.set_wakeup_fd(previous)
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            self._wake_r.close()
            self._wake_w.close()
        log.info("fleet.stopped", exit_code=self._code)
        return self._code

    def _live(self) -> list[_Slot]:
        return [s for s in self._slots if s.process is not None]

    def _watched(self) -> list[_Slot]:
        """Every process not reaped yet: the slots' and those replaced already."""
        return self._live() + self._leaving

    def _step(self) -> None:
        now = time.monotonic()
        waits = [s.restart_at - now for s in self._slots if s.restart_at is not None and not self._stopping]
        waits += [deadline - now for deadline in map(_deadline, self._watched()) if deadline is not None]
        timeout = max(0.0, min(waits)) if waits else None
        handles: list[Any] = [self._wake_r]
        for slot in self._watched():
            assert slot.process is not None
            handles.append(slot.process.sentinel)
            if slot.conn is not None:
                handles.append(slot.conn)
        ready = wait(handles, timeout)
        if self._wake_r in ready:
            self._drain_wakeups()
        for slot in self._watched():
            if slot.conn is not None and slot.conn in ready:
                self._read(slot)
        for slot in self._watched():
            assert slot.process is not None
            if slot.process.sentinel in ready:
                self._exited(slot)
        self._handle_signals()
        self._handle_reload()
        self._restart_due()
        self._hand_over()
        self._enforce_deadlines()

    # -- processes ------------------------------------------------------------------------

    def _start(self, slot: _Slot) -> None:
        reader, writer = self._ctx.Pipe(duplex=False)
        process = self._ctx.Process(
            target=self._target, args=(self._spec, slot.index, writer), name=f"jsworker-{slot.index}"
        )
        process.start()
        writer.close()
        slot.process, slot.conn = process, reader
        slot.started_at = time.monotonic()
        slot.ready = slot.replacing = slot.waiting_for_change = False
        slot.failure = slot.retiring = slot.restart_at = None
        slot.exiting = slot.exit_by = slot.stop_by = None
        slot.killed = None
        log.info("fleet.process_started", process=slot.index, pid=process.pid)

    def _read(self, slot: _Slot) -> None:
        conn = slot.conn
        assert conn is not None and slot.process is not None
        try:
            while conn.poll():
                kind, text = decode(conn.recv_bytes())
                if kind is Kind.METRICS:
                    # None comes after EXITING; were one to, it must not count a second time.
                    if slot.exiting is None:
                        self.metrics.update(slot.process.pid or 0, text)
                elif kind is Kind.READY:
                    slot.ready = self._ever_ready = True
                    log.info("fleet.process_ready", process=slot.index, pid=slot.process.pid)
                elif kind is Kind.FAILED:
                    slot.failure = text
                elif kind is Kind.RECYCLING:
                    slot.retiring = text
                elif kind is Kind.EXITING and slot.exiting is None:
                    slot.exiting = int(text) if text.lstrip("-").isdigit() else 1
                    slot.exit_by = time.monotonic() + EXIT_DEADLINE
        except (EOFError, OSError):
            conn.close()
            slot.conn = None
        except ValueError:
            log.warning("fleet.unreadable_message", process=slot.index)

    def _exited(self, slot: _Slot) -> None:
        process = slot.process
        assert process is not None
        if slot.conn is not None:
            self._read(slot)
            if slot.conn is not None:
                slot.conn.close()
        # Before it is reaped, while its group id is still its own: what it started and left
        # running (it was killed, or died) must not go on without it.
        left = kill_group_left(process.pid or 0)
        if left:
            log.warning("fleet.orphans_killed", process=slot.index, pid=process.pid, orphans=left)
        process.join()
        code = process.exitcode
        if slot.killed is not None and slot.exiting is not None:
            # Its worker had ended before the process had to be killed: that is how it ended.
            code = slot.exiting
        self.metrics.retire(process.pid or 0)
        slot.process, slot.conn = None, None
        if slot in self._leaving:
            self._leaving.remove(slot)
            log.debug("fleet.process_exited", process=slot.index, pid=process.pid, exit_code=code)
            return
        uptime = time.monotonic() - slot.started_at
        if self._stopping:
            log.info("fleet.process_stopped", process=slot.index, exit_code=code)
            # Ended by the signal itself: it came before the process could take up jobs, or
            # after it had given them all back.
            if code not in (0, -signal.SIGTERM, -signal.SIGINT):
                self._code = 1
            return
        if slot.retiring is not None or slot.replacing:
            self._replace(slot, process.pid)
            return
        cause = slot.failure or _describe(code)
        if not slot.ready and self._reload is not None:
            log.error("fleet.process_cannot_start", process=slot.index, cause=cause, waiting="for a change")
            slot.waiting_for_change = True
            return
        if not slot.ready and not self._ever_ready:
            # The app cannot start at all: restarting would only repeat it.
            self.failure = f"worker process {slot.index} could not start: {cause}"
            log.error("fleet.cannot_start", process=slot.index, cause=cause)
            self._code = 1
            self._stop_all(signal.SIGTERM)
            return
        slot.crashes = 1 if uptime >= _STABLE_AFTER else slot.crashes + 1
        delay = min(_MAX_BACKOFF, 2.0 ** (slot.crashes - 1))
        log.error("fleet.process_died", process=slot.index, cause=cause, restart_in=delay)
        slot.restart_at = time.monotonic() + delay

    def _replace(self, slot: _Slot, pid: int | None) -> None:
        """Start the process that replaces the retiring process ``pid`` of ``slot``."""
        if slot.retiring is not None:
            log.info("fleet.process_recycled", process=slot.index, pid=pid, reason=slot.retiring)
            self._count(slot.retiring)
        else:
            self._count("reload")
        self._start(slot)

    def _hand_over(self) -> None:
        """Replace each retiring process whose worker has ended at once: it holds no job any
        more, and what is left of it (its exit) has until its exit_by, or is killed."""
        if self._stopping:
            return
        for slot in self._slots:
            if slot.process is None or slot.exiting is None or not (slot.retiring or slot.replacing):
                continue
            leaving = dataclasses.replace(slot)
            self._leaving.append(leaving)
            # Its last snapshot came before it said it exits: its totals are final.
            self.metrics.retire(slot.process.pid or 0)
            self._replace(slot, slot.process.pid)

    def _restart_due(self) -> None:
        if self._stopping:
            return
        now = time.monotonic()
        for slot in self._slots:
            if slot.process is None and slot.restart_at is not None and slot.restart_at <= now:
                self._count("crash")
                self._start(slot)

    def _count(self, reason: str) -> None:
        if self._restarts is not None:
            self._restarts.labels(reason).inc()

    def _enforce_deadlines(self) -> None:
        now = time.monotonic()
        for slot in self._watched():
            deadline = _deadline(slot)
            if deadline is not None and now >= deadline:
                self._kill(slot)

    def _kill(self, slot: _Slot) -> None:
        """Kill the process of ``slot`` and every process it started; its exit is handled
        when the supervisor sees it."""
        assert slot.process is not None and slot.process.pid is not None
        pid = slot.process.pid
        children = kill_tree(pid)
        slot.killed = reason = "exit" if slot.exiting is not None else "stop"
        # A process whose worker had ended cleanly lost nothing by the kill: a warning; one
        # that never ended its worker, an error.
        if reason == "exit":
            say, cause = log.warning, f"still running {EXIT_DEADLINE:g} s after its worker ended"
        else:
            cause = f"not stopped {self._grace:g} + {_STOP_MARGIN:g} s after it was asked to"
            say = log.error
        say(
            "fleet.process_killed", process=slot.index, pid=pid, reason=reason, cause=cause, children=children
        )
        if self._kills is not None:
            self._kills.labels(reason).inc()

    # -- signals, reload, stopping --------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1

    def _wake(self) -> None:
        # Full: a wake-up is already pending; closed: the supervisor is stopping.
        with contextlib.suppress(OSError):
            self._wake_w.send(b"!")

    def _drain_wakeups(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while self._wake_r.recv(4096):
                pass

    def _handle_signals(self) -> None:
        if self._signals == self._signals_handled:
            return
        first = self._signals_handled == 0
        self._signals_handled = self._signals
        if first:
            log.info("fleet.stopping", grace=self._grace)
            self._stop_all(signal.SIGTERM)
        else:
            log.warning("fleet.stopping_now")
            for slot in self._live():
                assert slot.process is not None and slot.process.pid is not None
                if slot.killed is None and slot.exiting is None:
                    os.kill(slot.process.pid, signal.SIGINT)

    def _stop_all(self, sig: signal.Signals) -> None:
        self._stopping = True
        for slot in self._slots:
            slot.restart_at = None
            if slot.process is not None and slot.process.pid is not None and slot.killed is None:
                self._ask_to_stop(slot, sig)

    def _ask_to_stop(self, slot: _Slot, sig: signal.Signals) -> None:
        assert slot.process is not None and slot.process.pid is not None
        os.kill(slot.process.pid, sig)
        if slot.stop_by is None:
            slot.stop_by = time.monotonic() + self._grace + _STOP_MARGIN

    def _handle_reload(self) -> None:
        if self._reload is None or self._stopping:
            return
        changes = self._reload.take()
        if not changes:
            return
        log.info("fleet.reloading", changed=changes[:5], files=len(changes))
        for slot in self._slots:
            if slot.process is not None and slot.process.pid is not None:
                slot.replacing = True
                if slot.killed is None:
                    self._ask_to_stop(slot, signal.SIGTERM)
            elif slot.waiting_for_change or slot.restart_at is not None:
                self._start(slot)


def _deadline(slot: _Slot) -> float | None:
    """When the process of ``slot`` is killed if it is still there (None: never)."""
    if slot.killed is not None:
        return None  # killed once: it goes
    # A process whose worker has ended gets its own deadline, whatever it was asked before.
    return slot.exit_by if slot.exiting is not None else slot.stop_by


def _describe(code: int | None) -> str:
    if code is None:
        return "unknown exit"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
