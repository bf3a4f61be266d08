"""Waiting for conditions, reading a server's stream and consumer state, and the tools a test
needs, for every suite.

A test waits for what it needs to be true, never for a length of time: :func:`wait_until`
(and :func:`wait_until_async` on an event loop) polls a condition and fails the test with the
last value it saw. The server readers open a connection of their own per call, so they work
whatever the code under test did to its connections, and never depend on that code.

A test that needs something outside the project (a tool, a binary, an optional package) asks
for it with :func:`need`: skipped without it locally, failed under CI.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NoReturn, TypeVar, overload

import nats
import nats.errors
import nats.js.errors
import pytest
from nats.aio.client import Client
from nats.js.api import RawStreamMsg

from jsworker._server.loopback import pick_port
from jsworker._wire.names import Namespace

T = TypeVar("T")

Servers = str | Sequence[str]

#: What a server answers (or what connecting to it raises) while it restarts or while its
#: cluster elects a leader: worth asking again.
UNSETTLED: tuple[type[Exception], ...] = (nats.errors.Error, TimeoutError, OSError)


# -- what a test needs ---------------------------------------------------------------------

# Values of CI that mean "not on CI" (unset is one of them).
_FALSY = {"", "0", "false", "no", "off", "n", "f"}


def in_ci() -> bool:
    """Whether the tests run on CI (``CI`` set to anything but a false value, as CI services do)."""
    return os.environ.get("CI", "").strip().lower() not in _FALSY


@overload
def need(condition: Literal[False], why: str) -> NoReturn: ...


@overload
def need(condition: bool, why: str) -> None: ...


def need(condition: bool, why: str) -> None:
    """Go on when ``condition`` holds; otherwise skip the test (or module, when called at its top
    level), saying ``why`` it cannot run, except on CI (:func:`in_ci`), where the test fails:
    there a skip would hide that it never ran.

    ``need(False, why)`` in an ``except`` clause ends the test whatever happens, which the
    type checker knows.
    """
    if condition:
        return
    if in_ci():
        pytest.fail(f"{why} (failing instead of skipping because CI is set)", pytrace=False)
    pytest.skip(why, allow_module_level=True)


# -- waiting -------------------------------------------------------------------------------


class _Polling:
    """What one wait has seen so far, shared by :func:`wait_until` and :func:`wait_until_async`."""

    def __init__(self, timeout: float, message: str, until: Callable[[Any], object]) -> None:
        self.timeout, self.message, self.until = timeout, message, until
        self.deadline = time.monotonic() + timeout
        self.last: object = None
        self.expired = False

    def begin(self) -> None:
        """Start one try; the try after the deadline is the last."""
        self.expired = time.monotonic() >= self.deadline

    def holds(self, value: Any) -> bool:
        """Whether ``value`` ends the wait; remembers it for the failure message otherwise."""
        if self.until(value):
            return True
        self.last = value
        return False

    def give_up_if_expired(self) -> None:
        if self.expired:
            raise AssertionError(
                f"timed out after {self.timeout:g}s waiting for {self.message}; last observed: {self.last!r}"
            )


def wait_until(
    condition: Callable[[], T],
    *,
    timeout: float = 10.0,
    interval: float = 0.05,
    message: str = "the condition",
    until: Callable[[T], object] = bool,
    ignore: tuple[type[Exception], ...] = (),
) -> T:
    """Call ``condition`` every ``interval`` seconds until ``until(value)`` holds (by default:
    until the value is truthy); return that value.

    An exception of a type in ``ignore`` counts as "not yet". After ``timeout`` seconds the
    condition is tried once more, then AssertionError names ``message`` and the last value
    (or exception) observed.
    """
    polling = _Polling(timeout, message, until)
    while True:
        polling.begin()
        try:
            value = condition()
        except ignore as exc:
            polling.last = exc
        else:
            if polling.holds(value):
                return value
        polling.give_up_if_expired()
        time.sleep(interval)


@overload
async def wait_until_async(
    condition: Callable[[], Awaitable[T]],
    *,
    timeout: float = ...,
    interval: float = ...,
    message: str = ...,
    until: Callable[[T], object] = ...,
    ignore: tuple[type[Exception], ...] = ...,
) -> T: ...


@overload
async def wait_until_async(
    condition: Callable[[], T],
    *,
    timeout: float = ...,
    interval: float = ...,
    message: str = ...,
    until: Callable[[T], object] = ...,
    ignore: tuple[type[Exception], ...] = ...,
) -> T: ...


async def wait_until_async(
    condition: Callable[[], Any],
    *,
    timeout: float = 10.0,
    interval: float = 0.05,
    message: str = "the condition",
    until: Callable[[Any], object] = bool,
    ignore: tuple[type[Exception], ...] = (),
) -> Any:
    """:func:`wait_until` for a test running on an event loop: the condition may be a plain
    function or return an awaitable, and the loop keeps running between tries."""
    polling = _Polling(timeout, message, until)
    while True:
        polling.begin()
        try:
            value = condition()
            if inspect.isawaitable(value):
                value = await value
        except ignore as exc:
            polling.last = exc
        else:
            if polling.holds(value):
                return value
        polling.give_up_if_expired()
        await asyncio.sleep(interval)


# -- the server ---------------------------------------------------------------------------


@asynccontextmanager
async def connected(servers: Servers) -> AsyncIterator[Client]:
    """A plain nats-py connection of our own, closed after the block. Short timeouts and few
    reconnect attempts: a caller polling a server that is down must get an error, not a hang."""
    urls = [servers] if isinstance(servers, str) else list(servers)
    nc = await nats.connect(servers=urls, connect_timeout=2, max_reconnect_attempts=3)
    try:
        yield nc
    finally:
        await nc.close()


@dataclass(frozen=True, slots=True)
class StreamState:
    """A stream as the server reports it."""

    messages: int  # stored now
    first_seq: int
    last_seq: int  # the last sequence ever stored (0 for none)


async def stream_state_async(servers: Servers, stream: str) -> StreamState:
    """The state of ``stream`` now; nats.js.errors.NotFoundError when it does not exist."""
    async with connected(servers) as nc:
        state = (await nc.jetstream().stream_info(stream)).state
    return StreamState(int(state.messages), int(state.first_seq), int(state.last_seq))


def stream_state(servers: Servers, stream: str) -> StreamState:
    """The state of ``stream`` now (from a test that is not on an event loop)."""
    return asyncio.run(stream_state_async(servers, stream))


async def stream_messages_async(servers: Servers, stream: str) -> int:
    """Messages stored in ``stream`` now."""
    return (await stream_state_async(servers, stream)).messages


def stream_messages(servers: Servers, stream: str) -> int:
    """Messages stored in ``stream`` now (from a test that is not on an event loop)."""
    return stream_state(servers, stream).messages


@dataclass(frozen=True, slots=True)
class ConsumerState:
    """A durable consumer as the server reports it."""

    delivered: int  # deliveries made, redeliveries included (the last consumer sequence)
    delivered_stream_seq: int  # the last stream sequence delivered
    ack_floor: int  # consumer sequence up to which every delivery is acknowledged
    ack_pending: int  # delivered, not acknowledged yet
    redelivered: int  # of those, delivered more than once
    pending: int  # matching messages not delivered yet
    waiting: int  # pull requests waiting for messages

    @property
    def settled(self) -> bool:
        """Nothing left to deliver and nothing delivered that is not acknowledged."""
        return self.pending == 0 and self.ack_pending == 0


async def consumer_state_async(servers: Servers, stream: str, consumer: str) -> ConsumerState:
    """The state of ``consumer`` on ``stream`` now; nats.js.errors.NotFoundError when it does not exist."""
    async with connected(servers) as nc:
        info = await nc.jetstream().consumer_info(stream, consumer)
    delivered, floor = info.delivered, info.ack_floor
    return ConsumerState(
        delivered=(delivered.consumer_seq or 0) if delivered else 0,
        delivered_stream_seq=(delivered.stream_seq or 0) if delivered else 0,
        ack_floor=(floor.consumer_seq or 0) if floor else 0,
        ack_pending=info.num_ack_pending or 0,
        redelivered=info.num_redelivered or 0,
        pending=info.num_pending or 0,
        waiting=info.num_waiting or 0,
    )


def consumer_state(servers: Servers, stream: str, consumer: str) -> ConsumerState:
    """The state of ``consumer`` on ``stream`` now (from a test that is not on an event loop)."""
    return asyncio.run(consumer_state_async(servers, stream, consumer))


def _settled(state: ConsumerState) -> bool:
    return state.settled


def _settling(stream: str, consumer: str) -> str:
    return f"consumer {consumer} of {stream} to have every message delivered and acknowledged"


def wait_consumer_settled(
    servers: Servers, stream: str, consumer: str, *, timeout: float = 30.0
) -> ConsumerState:
    """Wait until ``consumer`` has nothing left to deliver and every delivery acknowledged; its
    state then. From here on the server delivers nothing more, so ``delivered`` is final: equal
    to the number of jobs, it proves that none was delivered (and run) twice."""
    return wait_until(
        lambda: consumer_state(servers, stream, consumer),
        until=_settled,
        timeout=timeout,
        interval=0.1,
        message=_settling(stream, consumer),
        ignore=UNSETTLED,
    )


async def wait_consumer_settled_async(
    servers: Servers, stream: str, consumer: str, *, timeout: float = 30.0
) -> ConsumerState:
    """:func:`wait_consumer_settled` on an event loop."""
    return await wait_until_async(
        lambda: consumer_state_async(servers, stream, consumer),
        until=_settled,
        timeout=timeout,
        interval=0.1,
        message=_settling(stream, consumer),
        ignore=UNSETTLED,
    )


# -- ports ----------------------------------------------------------------------------------


class PortTaken(Exception):
    """A process we started could not bind the port it was given: someone else took it."""


def exited(proc: Any, log: Path, offset: int, taken: str, what: str) -> None:
    """Raise for a process of ours that ended while we waited for it: :class:`PortTaken`
    when its output past ``offset`` says ``taken`` (try another port), else AssertionError."""
    said = log.read_bytes()[offset:].decode(errors="replace")
    if taken in said:
        raise PortTaken(said)
    raise AssertionError(f"{what} exited with {proc.returncode}:\n{said}")


#: The environment of a command pointed at a port nobody listens on: it gives up connecting after
#: 1 s instead of the default 5 s. What it prints and its exit code do not depend on how long it
#: tried.
REFUSED_QUICKLY = {"JSWORKER_CONNECT_TIMEOUT": "1"}


def free_port() -> int:
    """A loopback port nobody had bound a moment ago, below the ports outgoing connections
    get and picked by no other live process of the run (see
    :func:`jsworker._server.loopback.pick_port`): a hint, whoever binds it first gets it."""
    return pick_port()


def on_a_free_port(start: Callable[[int], T], attempts: int = 5) -> T:
    """``start(port)`` on a :func:`free_port`; on another one while ``start`` raises
    :class:`PortTaken` (the last attempt's PortTaken reaches the caller)."""
    for _ in range(attempts - 1):
        try:
            return start(free_port())
        except PortTaken:
            continue
    return start(free_port())


def _threads_stopped(pid: int) -> bool:
    # The third field of /proc/<pid>/task/<tid>/stat is the thread's state: T once stopped.
    # The name before it is in parentheses and may hold spaces, hence the split after ")".
    tasks = Path(f"/proc/{pid}/task")
    for stat in tasks.glob("*/stat"):
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # a thread that ended meanwhile
        if state not in ("T", "t"):
            return False
    return True


def freeze(pid: int, timeout: float = 10.0) -> None:
    """SIGSTOP ``pid`` and wait until every thread of it has stopped.

    ``kill`` returns once the signal is queued: each thread of a multi-threaded process (a
    nats-server) stops only when it next enters the kernel, and meanwhile it may still answer
    what reached it. A test that means "nothing answers now" waits for that.
    """
    os.kill(pid, signal.SIGSTOP)
    wait_until(
        lambda: _threads_stopped(pid), timeout=timeout, interval=0.001, message=f"process {pid} to stop"
    )


def connections(monitoring_url: str) -> list[dict[str, Any]]:
    """The client connections a server lists on its monitoring port (``/connz``)."""
    # No proxy may see (or swallow) a request to our own loopback monitoring port.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{monitoring_url}/connz?limit=1024", timeout=5) as response:
        return list(json.loads(response.read()).get("connections") or [])


async def made_schedule(nc: Client, namespace: Namespace, queue: str, due: int, job_id: str) -> RawStreamMsg:
    """The ``@at`` schedule a worker made of delayed job ``job_id`` (due ``due``, unix ms) in the
    schedules stream, once it has made it."""

    async def stored() -> RawStreamMsg | None:
        try:
            return await nc.jetstream().get_last_msg(
                namespace.schedules_stream, namespace.delayed_subject(queue, due, job_id)
            )
        except nats.js.errors.NotFoundError:
            return None

    found = await wait_until_async(stored, timeout=10, message=f"the schedule of {job_id}")
    assert found is not None
    return found


def most_in_any_second(times: Iterable[float]) -> int:
    """The most of ``times`` (starts, in seconds) any one-second stretch holds (it may begin
    anywhere): what a rate limit bounds."""
    ordered = sorted(times)
    most, first = 0, 0
    for last, t in enumerate(ordered):
        while t - ordered[first] >= 1.0:
            first += 1
        most = max(most, last - first + 1)
    return most
