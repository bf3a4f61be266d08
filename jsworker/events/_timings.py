"""How long jobs waited and ran, from the job events of a window: ``started`` says how long a
run waited since its job was enqueued (``queue_wait``), ``succeeded`` and ``failed`` how long
it ran (``duration``). Read with bodies through a throwaway consumer, at most ``limit``
events: a window holding more is shortened to its newest part that holds about that many, as
:func:`~jsworker.events._window.count_events` does, and the timings say so (``cut``)."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .._wire.names import Namespace
from ..jetstream.connection import Connection
from ..jetstream.history import stream_bounds
from ._schema import decode_event
from ._window import _missing, _span

#: The most events one read of timings takes.
TIMING_LIMIT = 50_000
_KINDS = ("started", "succeeded", "failed")


def percentile(ordered: Sequence[float], share: float) -> float | None:
    """The value ``share`` (0 to 1) of the way up ``ordered`` (sorted), by nearest rank;
    None for no values."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]


@dataclass(frozen=True, slots=True)
class Timings:
    """Wait and run times, in seconds, per (queue, task), of the runs whose events were stored
    from ``since`` (unix seconds) on; ``reads`` events were read, and ``cut`` says the window
    held more than the read's limit and was shortened to ``since``."""

    since: float
    reads: int = 0
    cut: bool = False
    waits: Mapping[tuple[str, str], Sequence[float]] = field(default_factory=dict)
    runs: Mapping[tuple[str, str], Sequence[float]] = field(default_factory=dict)

    def measured(self) -> list[tuple[str, str]]:
        """Every (queue, task) with a wait or a run, sorted."""
        return sorted({*self.waits, *self.runs})


async def read_timings(
    conn: Connection, ns: Namespace, *, window: float, limit: int = TIMING_LIMIT
) -> Timings:
    """The wait and run times of the last ``window`` seconds (see the module);
    :class:`~jsworker.EventsNotFound` when the app has no events stream."""
    now = time.time()
    since = now - window
    bounds = await stream_bounds(conn, ns.events_stream)
    if bounds is None:
        raise _missing(ns)
    if bounds.messages == 0:
        return Timings(since)
    filters = [ns.event_subject("*", "*", kind) for kind in _KINDS]
    waits: dict[tuple[str, str], list[float]] = defaultdict(list)
    runs: dict[tuple[str, str], list[float]] = defaultdict(list)
    reads, cut = 0, False
    while True:
        async with _span(conn, ns, filters, start_time=since) as span:
            if span.pending > limit and not cut:
                # The newest part of the window that holds about ``limit`` of them.
                cut = True
                since = now - (now - since) * limit / span.pending
                continue
            async for msg in span.messages(bounds.last_seq):
                reads += 1
                event = decode_event(msg.body or b"")
                if event is None:
                    continue
                key = (event.queue, event.task)
                if event.event == "started" and event.queue_wait is not None:
                    waits[key].append(event.queue_wait)
                elif event.duration is not None:
                    runs[key].append(event.duration)
            break
    return Timings(
        since,
        reads,
        cut,
        {k: sorted(v) for k, v in waits.items()},
        {k: sorted(v) for k, v in runs.items()},
    )
