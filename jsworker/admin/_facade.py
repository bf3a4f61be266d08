"""``Admin(app)``: one async façade over what the server keeps of an app, for the command
line and dashboards alike.

It holds one ``operator`` connection (or a ``dashboard`` one) and delegates: queue figures to
:func:`~jsworker._core.queues.queue_status`, workers to :func:`~jsworker._registry.entries.live_workers`,
dead letters to :class:`~jsworker._deadletters.DeadLetters`, schedules to
:class:`~jsworker._scheduling.admin.Schedules`, a job's status and its cancel to
:mod:`jsworker._lifecycle`, and job listings to :mod:`jsworker.admin._listing`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from .._core.paging import Page, check_limit
from .._core.queues import QueueStatus, queue_status
from .._deadletters.admin import DeadLetters
from .._deadletters.letter import DeadLetter
from .._enqueue.receipt import Job
from .._enqueue.task import check_job_id
from .._errors import ConfigurationError
from .._lifecycle.cancel import cancel_job
from .._lifecycle.lookup import job_status
from .._lifecycle.state import JobStatus
from .._limits.overrides import check_limits
from .._registry.entries import WorkerEntry, live_workers
from .._scheduling.admin import Schedules
from .._scheduling.periodic import ScheduleState, SyncReport
from .._wire.names import validate_name
from ..events._depth import DepthSeries, read_depth
from ..events._timings import TIMING_LIMIT, Timings
from ..events._timings import read_timings as _read_timings
from ..events._window import BUCKET, COUNT_LIMIT, TIMELINE_LIMIT, WINDOW, EventCounts, JobTimeline
from ..events._window import count_events as _count_events
from ..events._window import job_timeline as _job_timeline
from ..jetstream.connection import Connection
from ..jetstream.health import StreamHealth, stream_health
from ..jetstream.limits_stream import LimitsStream, StoredMessage
from ..jetstream.pause import PauseState
from ..jetstream.session import OperatorSession, SessionRole
from ..workflows._definition import FLOW, def_subject
from ..workflows._handle import Workflow, WorkflowStatus
from . import _operations as operations
from ._ended import ENDED_STATES, ended_counts, ended_page
from ._listing import JobListing, StreamState
from ._operations import JobResult
from ._search import SearchResult, search_jobs
from ._summary import LISTED_STATES, JobPage, ListedState, RunningJobs, enqueued_at

if TYPE_CHECKING:
    from .._app import App


class _SharedDeadLetters(DeadLetters):
    """The app's dead letters on the Admin's connection rather than one of their own."""

    def __init__(self, admin: Admin) -> None:
        super().__init__(admin.app)
        self._admin = admin

    async def connection(self) -> Connection:
        return await self._admin.connection()


class _SharedSchedules(Schedules):
    """The app's schedules on the Admin's connection rather than one of their own."""

    def __init__(self, admin: Admin) -> None:
        super().__init__(admin.app)
        self._admin = admin

    async def connection(self) -> Connection:
        return await self._admin.connection()


class _SharedWorkflow(Workflow):
    """A workflow read on the Admin's connection, each step's status read from the server
    directly (as :meth:`Admin.job`) rather than asked of the workers."""

    def __init__(self, admin: Admin, flow_id: str) -> None:
        super().__init__(admin.app, flow_id)
        self._admin = admin

    async def _stream(self) -> LimitsStream:
        return LimitsStream(await self._admin.connection(), self.app.namespace.stream)

    async def _step_status(self, job_id: str) -> JobStatus:
        return await job_status(self.app, await self._admin.connection(), job_id)


# A step's job id is its workflow's id, or the id and the step's label (see step_id).
_STEP_ID = re.compile(r"(?P<flow>.+)-(?:\d+|m\d+|cb|err)")
# A timeline of a job whose times are all unknown starts this long ago.
_LOOKBACK = 3600.0


class Admin(OperatorSession):
    """Everything an operator reads and does on ``app``, over one connection::

        async with Admin(app) as admin:
            for queue in await admin.queues():
                print(queue.queue, queue.pending, queue.in_flight)
            page = await admin.jobs(queue="default", state="queued", limit=50)
            more = await admin.jobs(queue="default", state="queued", after=page.next_after)

    Connects as the ``operator`` role (``jsworker permissions``) on first use, on the event
    loop it is used from; close it with :meth:`aclose` or ``async with``. With
    ``role="dashboard"`` it connects as the web dashboard's role instead, which reads as much
    but may only take the dashboard's actions: it cancels by asking the workers (as a
    canceller does), and the server refuses it the rest (:meth:`sync_schedules`, which may
    create the app's streams). Listings are paged:
    a :class:`~jsworker._core.paging.Page` holds one page, never a whole stream (docs/admin.md
    says what each costs the server). Connection failures raise
    :class:`~jsworker.ConnectError`; a bad argument :class:`~jsworker.ConfigurationError`.
    """

    def __init__(self, app: App, *, purpose: str = "admin", role: SessionRole = "operator") -> None:
        # ``purpose`` names the connection on the server (``jsworker:<app>:<purpose>``): the
        # commands name theirs, as before they shared this.
        super().__init__(app, purpose, role)
        self._letters = _SharedDeadLetters(self)
        self._schedules = _SharedSchedules(self)

    # -- reading --------------------------------------------------------------------------

    async def queues(self) -> list[QueueStatus]:
        """Every queue of the app with its figures and live workers, sorted by name (what
        ``jsworker status`` shows; :func:`~jsworker._core.queues.queue_status` says the cost)."""
        return await queue_status(self.app, await self.connection(), workers=True)

    async def workers(self) -> list[WorkerEntry]:
        """The live worker processes, from the worker registry, sorted by host, pid and id
        (:class:`~jsworker.ServerVersionError` before nats-server 2.11)."""
        return await live_workers(self.app, await self.connection())

    async def schedules(self) -> list[ScheduleState]:
        """Every periodic schedule of the app on the server, by name."""
        return await self._schedules.list()

    async def jobs(
        self,
        queue: str | None = None,
        state: ListedState = "queued",
        task: str | None = None,
        limit: int = 50,
        after: str | int | None = None,
        *,
        newest_first: bool = False,
    ) -> JobPage:
        """One page of the jobs in ``state`` (``scheduled``, ``queued``, ``reserved``: handed
        to a worker that has not started them, ``running``, ``retrying``, ``failed``: dead
        letters, or from the job events, :class:`EventsNotFound` without them: ``succeeded``,
        ``cancelled``, ``expired``), of ``queue`` and ``task`` when given.

        Oldest first by stream sequence (``scheduled``: by due time), or newest first. Pass
        the page's ``next_after`` as ``after`` for the next one: a stream sequence, for
        ``scheduled`` ``<due ms>.<queue>.<job id>``. At most ``limit`` (1 to 10,000) jobs a
        page, and no more than one page is ever held. :mod:`jsworker.admin._listing` says how
        each state is read and what a page costs the server (``page.reads`` counts it).
        """
        if state not in LISTED_STATES:
            raise ConfigurationError(f"cannot list jobs {state!r}: use one of {', '.join(LISTED_STATES)}")
        check_limit(limit)
        if queue is not None:
            validate_name("queue", queue)
        if task is not None:
            validate_name("task", task)
        if state in ENDED_STATES:
            conn = await self.connection()
            return await ended_page(self.app, conn, state, queue, task, limit, after, newest_first)
        listing = JobListing(self.app, await self.connection(), self._letters)
        return await listing.page(cast(StreamState, state), queue, task, limit, after, newest_first)

    async def ended_counts(self, queue: str | None = None, task: str | None = None) -> dict[str, int]:
        """How many jobs succeeded, were cancelled and expired (of ``queue`` and ``task``) among
        the job events the app keeps; empty for an app without job events."""
        return await ended_counts(self.app, await self.connection(), queue, task)

    async def search(self, text: str, *, arguments: bool = True) -> SearchResult:
        """The newest waiting jobs and dead letters whose id, arguments (unless ``arguments``
        is false), caller headers or failure hold ``text`` (see :mod:`._search` for what a
        search reads)."""
        return await search_jobs(self.app, await self.connection(), text, arguments=arguments)

    async def job(self, job_id: str) -> JobStatus:
        """Where job ``job_id`` is in its lifecycle, read from the server directly (the same
        :class:`~jsworker.JobStatus` as ``app.astatus``, without asking the workers)."""
        return await job_status(self.app, await self.connection(), check_job_id(job_id))

    async def dead_letters(
        self,
        task: str | None = None,
        queue: str | None = None,
        limit: int = 50,
        after: str | int | None = None,
        *,
        newest_first: bool = False,
    ) -> Page[DeadLetter]:
        """One page of dead letters (of ``task`` and/or ``queue``), headers only; ``after`` is
        the previous page's ``next_after`` (a dead-letter sequence)."""
        return await self._letters.page(task, queue, limit=limit, after=after, newest_first=newest_first)

    async def dead_letter(self, ref: int | str) -> DeadLetter:
        """The dead letter with sequence ``ref``, or the newest one of job id ``ref``, body
        loaded (:class:`~jsworker._deadletters.DeadLetterNotFound` when none)."""
        return await self._letters.get(ref)

    async def count_dead_letters(self, task: str | None = None, queue: str | None = None) -> int:
        """How many dead letters are stored (of ``task`` and/or ``queue``)."""
        return await self._letters.count(task=task, queue=queue)

    async def job_message(self, job_id: str) -> StoredMessage | None:
        """The message the server holds for job ``job_id``, headers and body: its job message
        while it waits, runs or retries, its schedule while it is scheduled; None once it has
        left the job stream (a failed job's body is in its dead letter)."""
        return await operations.job_message(self.app, await self.connection(), check_job_id(job_id))

    async def job_result(self, job_id: str) -> JobResult | None:
        """The return value job ``job_id``'s record keeps, encoded (tasks with
        ``store_result``); None when there is none."""
        return await operations.job_result(self.app, await self.connection(), check_job_id(job_id))

    async def running_jobs(self, queue: str | None = None, limit: int = 1000) -> RunningJobs:
        """The jobs workers hold, running or reserved (of ``queue`` when given), at most
        ``limit`` (1 to 10,000), grouped by the worker holding each: what one :meth:`jobs`
        page of ``running`` and ``reserved`` together costs (the module
        :mod:`jsworker.admin._listing` says what)."""
        check_limit(limit)
        if queue is not None:
            validate_name("queue", queue)
        listing = JobListing(self.app, await self.connection(), self._letters)
        return RunningJobs.of(await listing.page("handed_out", queue, None, limit, None, False))

    async def workflow(self, flow_id: str) -> WorkflowStatus:
        """The status of workflow ``flow_id`` (a chain, group or chord; ``app.workflow(id)``'s
        :meth:`~jsworker.workflows.Workflow.astatus`), each step's read from the server as
        :meth:`job` does, 32 at a time. :class:`~jsworker.JobNotFound` when there is no such
        workflow (or its definition expired, ``workflow_ttl`` after its last write)."""
        return await _SharedWorkflow(self, check_job_id(flow_id)).astatus()

    async def workflow_of(self, job_id: str) -> str | None:
        """The id of the workflow job ``job_id`` is a step of, None when it is none: its
        message's ``Jsw-Flow`` header while the server holds it; otherwise, for an app with
        ``workflows=True``, the workflow its id names (a step's id is its workflow's, or that
        and the step's label) if that workflow's definition is still kept."""
        job_id = check_job_id(job_id)
        message = await self.job_message(job_id)
        flow_id = message.headers.get(FLOW) if message is not None else None
        if flow_id:
            return flow_id
        if not self.app.options.workflows:
            return None
        named = _STEP_ID.fullmatch(job_id)
        stream = LimitsStream(await self.connection(), self.app.namespace.stream)
        for candidate in (job_id, named["flow"] if named else None):
            if candidate and await stream.next(def_subject(self.app.namespace, candidate)) is not None:
                return candidate
        return None

    async def event_counts(
        self,
        kinds: Iterable[str] = ("started", "dead_lettered"),
        *,
        window: float = WINDOW,
        bucket: float = BUCKET,
        after_seq: int | None = None,
        limit: int = COUNT_LIMIT,
    ) -> EventCounts:
        """How many job events of ``kinds`` each queue had per ``bucket`` seconds over the last
        ``window`` seconds, from the job-events stream (``App(events=True)``), or only those
        stored after sequence ``after_seq`` (a previous count's ``last_seq``: merge the two
        with :meth:`EventCounts.merged <jsworker.events._window.EventCounts.merged>`).

        One throwaway consumer reads the events of the window headers only; a window holding
        more than ``limit`` of them is shortened to its newest part (``cut``).
        :class:`~jsworker.EventsNotFound` when the app has no events stream.
        """
        return await _count_events(
            await self.connection(),
            self.app.namespace,
            tuple(kinds),
            window=window,
            bucket=bucket,
            after_seq=after_seq,
            limit=limit,
        )

    async def queue_depth(self, *, window: float = WINDOW, bucket: float = BUCKET) -> DepthSeries:
        """Each queue's waiting and in-flight jobs over the last ``window`` seconds, the last
        sample of each ``bucket``, from the samples the workers store every 30 s with job
        events on (see :mod:`jsworker.events._depth`); :class:`~jsworker.EventsNotFound`
        without an events stream."""
        return await read_depth(await self.connection(), self.app.namespace, window=window, bucket=bucket)

    async def job_timings(self, *, window: float = WINDOW, limit: int = TIMING_LIMIT) -> Timings:
        """How long the runs of the last ``window`` seconds waited (since their enqueue) and
        ran, per queue and task, from the job-events stream (``App(events=True)``): one read
        of the window's ``started``, ``succeeded`` and ``failed`` events, bodies included, at
        most ``limit`` of them (a window holding more is shortened to its newest part).
        :class:`~jsworker.EventsNotFound` when the app has no events stream."""
        return await _read_timings(await self.connection(), self.app.namespace, window=window, limit=limit)

    async def job_events(self, job_id: str, *, limit: int = TIMELINE_LIMIT) -> JobTimeline:
        """The events of job ``job_id`` in the job-events stream (``App(events=True)``), oldest
        first. The job's id is not in an event's subject, so they are looked for among the
        events of its queue and task from its enqueue on (when the server holds the job, its
        headers say when; otherwise from its last run, then its enqueue as its events tell),
        up to ``limit`` events read, stopping at the event that ended it
        (:func:`jsworker.events._window.job_timeline`). :class:`~jsworker.EventsNotFound`
        when the app has no events stream."""
        job_id = check_job_id(job_id)
        conn = await self.connection()
        status = await job_status(self.app, conn, job_id)
        message = None if status.state.finished else await operations.job_message(self.app, conn, job_id)
        sent = enqueued_at(message.headers) if message is not None else None
        known = [t.timestamp() for t in (status.started_at, status.finished_at, status.scheduled_for) if t]
        return await _job_timeline(
            conn,
            self.app.namespace,
            job_id,
            queue=status.queue,
            task=status.task,
            enqueued_at=sent.timestamp() if sent is not None else None,
            anchor=min(known, default=time.time() - _LOOKBACK),
            ended=status.state.value if status.state.finished else None,
            limit=limit,
        )

    async def health(self) -> StreamHealth:
        """The server's version and the job stream's health: its leader, its replicas (in a
        cluster) and what it holds; one small ``STREAM.INFO``."""
        return await stream_health(await self.connection(), self.app.namespace.stream)

    # -- acting ---------------------------------------------------------------------------

    async def cancel(self, job_id: str) -> bool:
        """Cancel job ``job_id`` as ``app.acancel`` does: True when it was scheduled, queued,
        retrying or running and now never runs (again); False when there was nothing to
        cancel. An operator carries it out itself; a dashboard asks the workers to (it may not
        write a job's record or tell a worker to stop a job), and with no worker running
        raises :class:`~jsworker.NoWorkerRunning`."""
        job_id = check_job_id(job_id)
        if self.role == "operator":
            return await cancel_job(self.app, await self.connection(), job_id)
        return await operations.ask_to_cancel(self.app, await self.connection(), job_id)

    async def replay_dead_letters(
        self, refs: Iterable[int | str] | None = None, *, task: str | None = None, all: bool = False
    ) -> list[Job]:
        """Enqueue dead letters again, then remove them (see
        :meth:`DeadLetters.replay <jsworker._deadletters.DeadLetters.replay>`)."""
        return await self._letters.replay(refs, task=task, all=all)

    async def replay_edited(self, ref: int | str, body: bytes) -> Job:
        """Replay one dead letter with ``body`` as its payload (its arguments corrected), then
        remove it (see :meth:`DeadLetters.replay_edited
        <jsworker._deadletters.DeadLetters.replay_edited>`)."""
        return await self._letters.replay_edited(ref, body)

    async def delete_dead_letter(self, seq: int) -> bool:
        """Delete one dead letter (by its sequence) for good; False when there was none."""
        return await self._letters.delete(seq)

    async def purge_dead_letters(self, task: str | None = None, queue: str | None = None) -> int:
        """Delete the dead letters of ``task`` and/or ``queue`` (all when neither) for good;
        returns how many."""
        return await self._letters.purge(task=task, queue=queue)

    async def pause_queue(self, queue: str, until: datetime | None = None) -> PauseState:
        """Stop ``queue``'s consumer handing out jobs until ``until`` (an aware datetime; for
        good when None) with the server's consumer pause (nats-server 2.11+): workers take
        none of its jobs until :meth:`resume_queue`, those running finish. A queue no worker
        has served yet gets its consumer made first (as its first worker would), paused; a
        queue the app does not declare is a :class:`~jsworker.ConfigurationError`."""
        return await operations.pause_queue(self.app, await self.connection(), queue, until)

    async def resume_queue(self, queue: str) -> bool:
        """Let paused ``queue``'s consumer hand out jobs again; False when it was not paused."""
        return await operations.resume_queue(self.app, await self.connection(), queue)

    async def set_queue_limits(
        self, queue: str, *, max_running: int | str | None = None, rate_limit: str | None = None
    ) -> dict[str, str]:
        """Change ``queue``'s limits without a deploy: ``max_running`` (jobs at once across
        every worker; 0 for none of its own), ``rate_limit`` (``"50/s"``, ``"N/m"``, ``"N/h"``,
        or ``"none"``); ``"declared"`` puts either back to what the code declares, None leaves
        it. A running worker makes the change (who asks may not change a queue's consumer),
        and a deploy does not undo it (see :mod:`jsworker._limits.overrides`); the server
        applies ``max_running`` at once, workers the rate within ``--stats-interval``. Returns
        the limits set at run time now, as :attr:`QueueStatus.overrides`."""
        asked = {"max_running": max_running, "rate_limit": rate_limit}
        asked = {name: value for name, value in asked.items() if value is not None}
        check_limits(self.app, queue, asked)  # a clear error before any round trip
        return await operations.ask_to_set_limits(self.app, await self.connection(), queue, asked)

    async def purge_queue(self, queue: str, task: str | None = None) -> int:
        """Remove every job of ``queue`` (only ``task``'s, when given) from the job stream;
        returns how many. The server purges from the oldest job on, so the messages of jobs
        in flight go too: a running job finishes its attempt but is not retried
        (:mod:`jsworker.admin._operations`). Delayed jobs stay; a fair queue's jobs waiting
        for their turn go too."""
        return await operations.purge_queue(self.app, await self.connection(), queue, task)

    async def retry_now(self, job_id: str) -> bool:
        """Run job ``job_id``, waiting out a retry's delay or a snooze, now: it is stored again
        under its id and starts at attempt 1, as a replayed dead letter does. False when it is
        not waiting so (or due within a second anyway)."""
        return await operations.retry_now(self.app, await self.connection(), check_job_id(job_id))

    async def put_schedule(
        self,
        name: str,
        task: str,
        *,
        cron: str | None = None,
        every: float | None = None,
        tz: str | None = None,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> str:
        """Create or change schedule ``name`` of declared task ``task``, one the code does not
        declare (a schedule the code declares is refused: change it there): ``created``,
        ``updated`` or ``unchanged``. Fields as ``App.schedule``'s; arguments as JSON. An
        operator writes it itself; a dashboard asks the workers to (it may not write schedules).
        Workers keep it, as every schedule they do not declare, until it is removed."""
        spec = {
            "task": task,
            "cron": cron,
            "every": every,
            "tz": tz,
            "args": list(args),
            "kwargs": dict(kwargs or {}),
        }
        if self.role == "operator":
            return await self._schedules.put(name, spec)
        return await operations.ask_to_put_schedule(self.app, await self.connection(), name, spec)

    async def quiet_worker(self, worker_id: str) -> bool:
        """Ask worker ``worker_id`` (its registry id) to take no new job: it gives back what
        it pulled, finishes what runs and stays up, its entry saying since when, until
        stopped. False when it was quiet already; :class:`~jsworker.JsworkerError` when no
        worker of that id answered."""
        return await operations.ask_worker(self.app, await self.connection(), "quiet", worker_id)

    async def stop_worker(self, worker_id: str) -> bool:
        """Ask worker ``worker_id`` to stop as on SIGTERM (its jobs get their grace period). A
        process of a fleet (``--processes``) is replaced by its supervisor: a restart."""
        return await operations.ask_worker(self.app, await self.connection(), "stop", worker_id)

    async def trigger_schedule(self, name: str) -> Job:
        """Enqueue one job of schedule ``name`` now, outside its cadence."""
        return await self._schedules.trigger(name)

    async def pause_schedule(self, name: str) -> bool:
        """Stop schedule ``name`` firing; False when it was paused already. An operator does
        it itself; a dashboard asks the workers to (it may not write schedules)."""
        return await self._set_paused(name, True)

    async def resume_schedule(self, name: str) -> bool:
        """Let paused schedule ``name`` fire again; False when it was not paused (done as
        :meth:`pause_schedule` is)."""
        return await self._set_paused(name, False)

    async def _set_paused(self, name: str, paused: bool) -> bool:
        if self.role == "operator":
            return await (self._schedules.pause(name) if paused else self._schedules.resume(name))
        return await operations.ask_to_pause(self.app, await self.connection(), name, paused)

    async def remove_schedule(self, name: str) -> bool:
        """Remove schedule ``name`` from the server; False when there was none."""
        return await self._schedules.remove(name)

    async def mark_unique_schedules(self, *, dry_run: bool = False) -> int:
        """Give a marker to each unique delayed job scheduled by an earlier version, once its
        workers are upgraded, so that a unique enqueue's one check sees it; how many lacked
        one (``dry_run``: only count them)."""
        return await self._schedules.mark_unique(dry_run=dry_run)

    async def sync_schedules(self, *, prune: bool = False) -> SyncReport:
        """Install the declared schedules as a starting worker does; with ``prune`` also
        remove those the app no longer declares."""
        return await self._schedules.sync(prune=prune)
