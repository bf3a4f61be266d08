"""The per-job concerns of the worker, each an :class:`~..pipeline.Interceptor` in a module of
its own, and :func:`assemble`, the one list of them in pipeline order.

In order (a feature that is off is left out): ``metrics`` (counts and logs each settled job),
``fired-jobs`` (a delayed job or tick runs only as the firing its claim names), ``cancels-and-
expiry`` (a job cancelled in the buffer or expired never starts), ``task-rate-limits``,
``partition-limits`` (a turn under the limit, or the job given back), ``events`` (job events),
``workflows`` (a step is the one its workflow stored; what follows it), ``task-processes`` (a
process task's job waits for a free task process before it starts), then any the worker was
given, then each of the app's ``middleware``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..._limits.partitions import Partitions
from ..._limits.rates import RateLimiter
from ...events._emit import EventEmitter
from ...jetstream.connection import Connection
from ...workflows._advance import Continuations
from ..jobbook import JobBook
from ..limited import Holding
from ..pipeline import Interceptor
from ..process_pool import ProcessRunner
from .cancels import CancelsAndExpiry
from .events import JobEvents
from .fired import FiredJobs
from .metrics import JobMetrics, JobMetricsLogged, debug_logged
from .middleware import AppMiddleware
from .partitions import PartitionLimits, partition_limited
from .rate_limits import TaskRateLimits
from .task_processes import TaskProcessSlots
from .workflows import Workflows

if TYPE_CHECKING:
    from ..._app import App

#: The names of the built-in interceptors, in pipeline order (docs/project-layout.md).
ORDER = (
    JobMetrics.name,
    FiredJobs.name,
    CancelsAndExpiry.name,
    TaskRateLimits.name,
    PartitionLimits.name,
    JobEvents.name,
    Workflows.name,
    TaskProcessSlots.name,
    AppMiddleware.name,
)


def assemble(
    app: App,
    conn: Connection,
    book: JobBook,
    limits: dict[str, RateLimiter],
    counts: Counter[str],
    processes: ProcessRunner,
    extra: Sequence[Interceptor] = (),
) -> list[Interceptor]:
    """The interceptors of a worker of ``app``, in pipeline order: those of the features that
    are on, ``extra`` (the worker's own), then the app's middleware. ``limits`` are the app's
    rate limiters, by scope (``t-<task>`` ones are tasks'); ``counts`` the worker's tally of
    settled jobs; ``processes`` the runner of the worker's task processes."""
    metrics = JobMetrics(app.metrics, counts)
    if debug_logged(metrics.log):
        metrics = JobMetricsLogged(app.metrics, counts)
    chain: list[Interceptor] = [metrics, FiredJobs(app, conn), CancelsAndExpiry(book)]
    holding = Holding(book)
    tasks = {name[2:]: limiter for name, limiter in limits.items() if name.startswith("t-")}
    if tasks:
        chain.append(TaskRateLimits(holding, tasks))
    # A partition key alone (a fair queue's turns) limits nothing here.
    partitioned = [t.name for t in app.tasks.values() if partition_limited(t)]
    if partitioned:
        held = app.metrics.partition_held
        for name in partitioned:
            held.labels(name)  # its series starts at 0
        parts = Partitions(conn, app.namespace, lambda task: held.labels(task).inc())
        chain.append(PartitionLimits(holding, parts, app.metrics.rate_held))
    if app.options.events:
        chain.append(JobEvents(EventEmitter(conn, app.namespace, app.metrics)))
    if app.options.workflows:
        forgeries = app.metrics.workflow_forgeries
        chain.append(Workflows(Continuations(app, conn, lambda what: forgeries.labels(what).inc())))
    if any(task.in_process for task in app.tasks.values()):
        chain.append(TaskProcessSlots(book, processes))
    chain += extra
    chain += [AppMiddleware(m) for m in app.middleware]
    return chain
