"""Rate limits across every worker, counted on the server.

Time is cut into windows (a tenth of the rate's period, or one per allowed start when the
rate allows fewer than ten): window ``i`` of a limit is a counter on
``jsw.<app>.rate.<limit>.<i>`` in the app's rates stream, and starts are added to it before
they happen, several in one round trip (no read first): as many as the worker has jobs for,
or used in the last window, for what is left of this one. A start whose addition brings the
counter past the window's share waits for the next window and tries again there; starts
counted and not used before their window ends are lost, never carried over. So no window
starts more than its share, whatever the number of workers. Any period-long stretch of time then holds at most
the rate's count plus two windows' shares: one because it overlaps one window more than a
period holds, one for the starts counted at the very end of a window that begin in the next
(a start is counted just before its job is taken, milliseconds before it runs).

Windows are numbered by each worker's own clock: clocks that disagree by ``d`` seconds let
two windows overlap for ``d``. Counters of past windows expire with the stream's
``max_age``. A worker killed while waiting holds nothing: a permit is taken only when a job
starts.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._errors import JsworkerError
from .._observability.logging import get_logger
from ..jetstream.counter import increment
from .spec import Rate

if TYPE_CHECKING:
    from .._wire.names import Namespace
    from ..jetstream.connection import Connection

log = get_logger("jsworker.flow")

# How long an unreachable server makes a start wait before it tries to count it again.
_UNCOUNTED_PAUSE = 0.5


# The most a worker waits past the start of a window before it counts in it.
_SPREAD = 0.005


class RateLimiter:
    """The permits of one limit (a queue's or a task's), shared by every worker of the app."""

    def __init__(
        self, conn: Connection, namespace: Namespace, scope: str, rate: Rate, held: Callable[[], None]
    ) -> None:
        self.conn = conn
        self.rate = rate
        self.scope = scope
        self._prefix = namespace.rate_subject(scope, "")
        # Called each time a start is refused a window (a metric).
        self._held = held
        # Starts taken from the server for window _window and not used yet: one round trip
        # takes as many as the caller has jobs for, within the window's share.
        self._window = -1
        self._left = 0
        # Starts this worker used in window _window, and in the one before it: its pace.
        self._used = self._used_before = 0

    async def acquire(self) -> None:
        """Wait until a job may start under the limit, and take that start."""
        while not await self.take():
            self._held()
            await self.next_window()

    async def take(self, wanted: int = 1) -> bool:
        """Take a start in the current window: False when the window has none left (or the
        server cannot count it: never start past the limit on a guess). ``wanted``: how many
        starts the caller has jobs for, taken in one round trip (the rest kept for its next
        calls in this window)."""
        if self.in_hand():
            return True
        rate = self.rate
        while True:
            now = time.time()
            index = int(now // rate.window)
            share = rate.share(index)
            if index != self._window:
                self._used_before = self._used if index == self._window + 1 else 0
                self._window, self._left, self._used = index, 0, 0
            # As many as the caller has jobs for, or as this worker used in the last window,
            # for what is left of this one (fewer round trips at a steady pace); never more
            # than the window's share for that time: a start taken and not used before the
            # window ends is lost to every worker.
            left = ((index + 1) * rate.window - now) / rate.window
            ask = max(1, min(math.ceil(share * left), max(wanted, math.ceil(self._used_before * left))))
            try:
                total = await increment(self.conn, f"{self._prefix}{index}", ask)
            except JsworkerError as exc:
                log.warning("rate.uncounted", limit=self.scope, error=str(exc))
                await asyncio.sleep(_UNCOUNTED_PAUSE)
                return False
            if index == int(time.time() // rate.window):
                break
            # The window ended during the round trip: what it granted is lost; ask the next.
        # The counter counts what was asked, granted or not: what was left before this ask.
        granted = 0 if total is None else max(0, min(ask, share - (total - ask)))
        if granted == 0:
            return False
        self._left, self._used = granted - 1, self._used + 1
        return True

    def in_hand(self) -> bool:
        """Take a start of the current window counted on the server already (by an earlier
        :meth:`take` for several); False when none is left in hand. No round trip."""
        if self._left > 0 and int(time.time() // self.rate.window) == self._window:
            self._left -= 1
            self._used += 1
            return True
        return False

    async def next_window(self) -> None:
        """Sleep until the next window, with a little spread so that the workers that waited
        do not all count in its first instant: up to a hundredth of the window (at most 5
        ms), which the window's starts lose on average half of."""
        window = self.rate.window
        end = (int(time.time() // window) + 1) * window
        await asyncio.sleep(max(0.0, end - time.time()) + random.random() * min(_SPREAD, window / 100))

    def held(self) -> None:
        """Count one start refused a window (a metric)."""
        self._held()
