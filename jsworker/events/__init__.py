"""Job events: what happened to every job, as a stream other tools can read.

An app created with ``App(events=True)`` publishes one small JSON message per lifecycle step
to ``JSW_<APP>_EVENTS`` (Limits retention, ``events_max_age``), on subject
``jsw.<app>.ev.<queue>.<task>.<event>``:

- ``enqueued`` (producer): the server stored a new job (not sent for duplicates);
- ``started`` (worker): a run begins;
- ``succeeded`` (worker): the run returned, the job is done;
- ``failed`` (worker): the run raised, timed out, asked to retry, was rejected or cancelled;
- ``retried`` (worker): after ``failed``, the job goes back to the queue;
- ``dead_lettered`` (worker): the job ends in the dead-letter stream, after ``failed`` or,
  for a job that never started (unknown task, bad body, too many deliveries), alone;
- ``scheduled`` (producer): a delayed job was stored to run later;
- ``cancelled`` (whoever cancelled it): the job was cancelled before it finished;
- ``expired`` (worker): the job was not started within its ``expires`` and never runs.

Events are fire-and-forget publishes: no acknowledgement is awaited, and a failure to emit
one never changes what happens to the job. They are observations, not a ledger.

Reading them back: :func:`export_events` (Parquet files, ``pyarrow``), :func:`aexport_events`
(its async form), :func:`read_event_rows` (chunks of rows of :data:`COLUMNS`, as the Spark
source and ``jsworker events`` read them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._core.lazy import lazy_getattr
from ._schema import EVENT_KINDS, EventKind, JobEvent, decode_event, encode_event

if TYPE_CHECKING:
    from ._export import aexport_events, export_events
    from ._reader import read_event_rows
    from ._rows import COLUMNS

__all__ = [
    "COLUMNS",
    "EVENT_KINDS",
    "EventKind",
    "JobEvent",
    "aexport_events",
    "decode_event",
    "encode_event",
    "export_events",
    "read_event_rows",
]

# The readers import on first use: a producer or a worker that emits events needs none of them.
_LAZY = {
    "COLUMNS": "._rows",
    "aexport_events": "._export",
    "export_events": "._export",
    "read_event_rows": "._reader",
}

if not TYPE_CHECKING:  # the checker sees the imports above instead
    __getattr__ = lazy_getattr(__name__, _LAZY, globals())
