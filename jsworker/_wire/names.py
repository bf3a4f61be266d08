"""Names of apps, queues and tasks, and the JetStream names derived from them.

One app is one namespace on the server: a job stream ``JSW_<APP>`` holding subjects
``jsw.<app>.q.<queue>.<task>``, a durable consumer per queue, and a dead-letter stream
``JSW_<APP>_DLQ`` holding ``jsw.<app>.dlq.<queue>.<task>``, and (when the app emits job
events) an events stream ``JSW_<APP>_EVENTS`` holding ``jsw.<app>.ev.<queue>.<task>.<event>``.

Streams are laid out by who writes them. Producers write only streams that honour no header
by which a publisher removes or repeats anything (no rollups, no schedules, no per-message
TTL): the job stream, where a delayed job waits as ``jsw.<app>.later.<queue>.<due>.<job>``
(``due`` in unix milliseconds) until a worker turns it into a schedule. Schedules live in
``JSW_<APP>_SCHED``, which only workers and operators write (a stream that allows schedules
also allows rollups, whatever its configuration asks): ``jsw.<app>.sched.at.<queue>.<due>.<job>``
for a delayed job, ``jsw.<app>.sched.repeat.<name>`` for a periodic schedule, each firing onto
``jsw.<app>.fired.<queue>.<task>[.<key>]`` in the same stream, from where a worker moves the
job into its queue. ``JSW_<APP>_CLAIMS`` holds ``jsw.<app>.claim.<job>.<due>``: which fired
message of a delayed job or a tick runs, so that one fired twice still runs once.

A queue with several partitions (``App(partitions=N)``) has its jobs spread over N job
streams by their ids: partition 0 is the job stream itself, partition ``k`` the stream
``JSW_<APP>_P<k>`` holding ``jsw.<app>.q<k>.<queue>.<task>.<job>``. Each stream has a leader
of its own, which a cluster places on a node of its choosing.

Two key-value buckets complete it: ``jsw_<app>_jobs`` (a record a job id: results and
lifecycle states) and ``jsw_<app>_workers`` (an entry a live worker process: the registry).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Literal

from .._errors import ConfigurationError

# Stricter than NATS needs: names also become stream and durable names, which forbid more
# characters than subjects do (and must survive being used in file paths on the server).
_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,64}")


def is_name(value: object) -> bool:
    """Whether ``value`` is usable as an app, queue or task name (see :func:`validate_name`)."""
    return isinstance(value, str) and _TOKEN.fullmatch(value) is not None


def validate_name(kind: str, value: str) -> str:
    """Return ``value`` if it is usable as an app, queue or task name, else raise.

    Allowed: letters, digits, ``_`` and ``-``, 1 to 64 characters. Dots, spaces and the
    wildcards ``*`` and ``>`` would split or widen NATS subjects.
    """
    if not is_name(value):
        raise ConfigurationError(
            f"invalid {kind} name {value!r}: use 1-64 letters, digits, '_' or '-' "
            "(no dots, spaces, '*' or '>')"
        )
    return value


# Suffixes of the streams an app has besides its job stream. An app whose own name ends in
# one (app "zeta_events") would have a job stream named like another app's ("zeta") events
# stream: such names are refused.
RESERVED_SUFFIXES = (
    "_dlq",
    "_events",
    "_depth",
    "_claims",
    "_sched",
    "_leases",
    "_rates",
    "_tally",
    "_sinks",
)
# Likewise the job streams of an app's partitions: ``JSW_<APP>_P<k>``.
_PARTITION_SUFFIX = re.compile(r"_p[0-9]+\Z", re.IGNORECASE)

#: The most partitions (job streams) one queue may have.
MAX_PARTITIONS = 64


def partition_of(job_id: str, partitions: int) -> int:
    """The partition, 0 to ``partitions - 1``, that job ``job_id`` of a queue with
    ``partitions`` lives in: the CRC-32 of its id, so that every process (and any language)
    finds a job by its id alone."""
    return zlib.crc32(job_id.encode()) % partitions if partitions > 1 else 0


def validate_app_name(value: str) -> str:
    """``value`` if it can name an app: a valid name (:func:`validate_name`) that does not end
    in one of :data:`RESERVED_SUFFIXES` (in any case), else :class:`ConfigurationError`."""
    validate_name("app", value)
    for suffix in RESERVED_SUFFIXES:
        if value.lower().endswith(suffix):
            raise ConfigurationError(
                f"invalid app name {value!r}: it must not end in {suffix!r}, or its job stream "
                f"JSW_{value.upper()} would be the {suffix[1:]} stream of app {value[: -len(suffix)]!r}"
            )
    if (match := _PARTITION_SUFFIX.search(value)) is not None:
        raise ConfigurationError(
            f"invalid app name {value!r}: it must not end in {match.group()!r}, or its job stream "
            f"JSW_{value.upper()} would be a partition of app {value[: match.start()]!r}"
        )
    return value


#: Who a connection is, for the server's permissions: each role gets replies on its own inbox
#: subjects, so a user of one role cannot read what is delivered to another.
#: A canceller is a producer that may also cancel jobs; a dashboard reads what an operator
#: reads and takes only the actions the web dashboard offers; a provisioner creates and
#: updates the app's streams (``jsworker provision``), which no other role may (see
#: :mod:`jsworker._core.permissions`).
Role = Literal["producer", "canceller", "worker", "operator", "dashboard", "provisioner"]
ROLES: tuple[Role, ...] = ("producer", "canceller", "worker", "operator", "dashboard", "provisioner")


@dataclass(frozen=True, slots=True)
class Namespace:
    """The JetStream names one app uses.

    App names are case-insensitive: stream names are upper-cased, so ``Shop`` and ``shop``
    must mean the same app everywhere, subjects included.
    """

    app: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "app", self.app.lower())

    @property
    def stream(self) -> str:
        """The job stream (WorkQueue retention)."""
        return f"JSW_{self.app.upper()}"

    def partition_stream(self, partition: int) -> str:
        """The job stream of ``partition``: the job stream itself for partition 0 (which also
        keeps delayed jobs, workflows and fair queues' intakes), ``JSW_<APP>_P<k>`` for the
        others (jobs only)."""
        return self.stream if partition == 0 else f"{self.stream}_P{partition}"

    def partition_subjects(self, partition: int) -> str:
        """Wildcard covering the job subjects of ``partition`` (:meth:`job_subject`)."""
        if not isinstance(partition, int) or partition < 0:
            raise ValueError(f"not a partition: {partition!r}")
        return f"jsw.{self.app}.{_queued(partition)}.>"

    def partition_in(self, subject: str) -> int:
        """The partition a job subject (:meth:`job_subject`) belongs to (0 for any other)."""
        parts = subject.split(".", 3)
        kind = parts[2] if len(parts) > 2 else ""
        return int(kind[1:]) if kind[:1] == "q" and kind[1:].isdigit() else 0

    def stream_of(self, subject: str) -> str:
        """The job stream that stores the job subject ``subject``."""
        return self.partition_stream(self.partition_in(subject))

    def to_partition(self, subject: str, partition: int) -> str:
        """Job subject ``subject`` (of any partition) moved into ``partition``."""
        if self.parse_job_subject(subject) is None:
            raise ValueError(f"not a job subject of app {self.app}: {subject}")
        return f"jsw.{self.app}.{_queued(partition)}.{subject.split('.', 3)[3]}"

    @property
    def dlq_stream(self) -> str:
        """The dead-letter stream (Limits retention)."""
        return f"JSW_{self.app.upper()}_DLQ"

    @property
    def events_stream(self) -> str:
        """The job-event stream (Limits retention)."""
        return f"JSW_{self.app.upper()}_EVENTS"

    @property
    def claims_stream(self) -> str:
        """The stream of claims on fired jobs (Limits retention, one message a subject)."""
        return f"JSW_{self.app.upper()}_CLAIMS"

    @property
    def schedules_stream(self) -> str:
        """The stream of schedules and their firings (WorkQueue retention; only workers and
        operators write it)."""
        return f"JSW_{self.app.upper()}_SCHED"

    @property
    def fired_subjects(self) -> str:
        """Wildcard covering every job a schedule fired (in the schedules stream)."""
        return f"jsw.{self.app}.fired.>"

    def fired_subject(self, job_subject: str) -> str:
        """The subject a schedule fires the job that goes to ``job_subject`` onto."""
        return self._swap(job_subject, "q", "fired")

    def unfired_subject(self, fired_subject: str) -> str:
        """The job subject a job fired onto ``fired_subject`` goes to."""
        return self._swap(fired_subject, "fired", "q")

    def _swap(self, subject: str, kind: str, other: str) -> str:
        prefix = f"jsw.{self.app}.{kind}."
        if not subject.startswith(prefix) or subject.count(".") not in (4, 5):
            raise ValueError(f"not a {kind} subject of app {self.app}: {subject}")
        return f"jsw.{self.app}.{other}.{subject[len(prefix) :]}"

    @property
    def later_subjects(self) -> str:
        """Wildcard covering every delayed job not yet made a schedule (in the job stream)."""
        return f"jsw.{self.app}.later.>"

    def later_subject(self, queue: str, due_ms: int, job_id: str) -> str:
        """Subject delayed job ``job_id`` due at ``due_ms`` is enqueued on by its producer."""
        return f"jsw.{self.app}.later.{queue}.{due_ms}.{job_id}"

    def later_filter(self, queue: str = "*", job_id: str = "*") -> str:
        """Filter of the enqueued delayed jobs of ``queue`` (all when ``*``), or of one job id."""
        if job_id != "*":
            return f"jsw.{self.app}.later.{queue}.*.{job_id}"
        return f"jsw.{self.app}.later.{queue}.>"

    def parse_later_subject(self, subject: str) -> tuple[str, int, str] | None:
        """``(queue, due_ms, job_id)`` of an enqueued delayed job's subject, None otherwise."""
        return self._parse_due(subject, "later")

    @property
    def mark_subjects(self) -> str:
        """Wildcard covering the markers of unique delayed jobs made schedules (in the job
        stream, written by workers only): ``...mark.<queue>.<task>.<job id>``."""
        return f"jsw.{self.app}.mark.>"

    def mark_subject(self, queue: str, task: str, job_id: str) -> str:
        """Subject of the marker that holds unique delayed job ``job_id``'s key in the job
        stream while its schedule waits in the schedules stream."""
        return f"jsw.{self.app}.mark.{queue}.{task}.{job_id}"

    def mark_filter(self, job_id: str = "*") -> str:
        """Filter of the markers of ``job_id`` (of every job when ``*``)."""
        return f"jsw.{self.app}.mark.*.*.{job_id}"

    def unique_filter(self, job_id: str) -> str:
        """Filter of every form in which job ``job_id`` holds its key in the first job stream:
        queued or running (``q``), delayed and not yet a schedule (``later``), a schedule
        (its marker, ``mark``). One check against it is a unique enqueue's only round trip."""
        return f"jsw.{self.app}.*.*.*.{job_id}"

    @property
    def job_subjects(self) -> str:
        """Wildcard covering every job subject of partition 0 (the only one of an app with one;
        see :meth:`partition_subjects`)."""
        return f"jsw.{self.app}.q.>"

    @property
    def dlq_subjects(self) -> str:
        """Wildcard covering every dead-letter subject of the app."""
        return f"jsw.{self.app}.dlq.>"

    @property
    def events_subjects(self) -> str:
        """Wildcard covering every job-event subject of the app."""
        return f"jsw.{self.app}.ev.>"

    @property
    def schedule_subjects(self) -> str:
        """Wildcard covering every schedule of the app (in the schedules stream)."""
        return f"jsw.{self.app}.sched.>"

    @property
    def claim_subjects(self) -> str:
        """Wildcard covering every claim of the app."""
        return f"jsw.{self.app}.claim.>"

    def delayed_subject(self, queue: str, due_ms: int, job_id: str) -> str:
        """Subject of the schedule that fires delayed job ``job_id`` at ``due_ms``."""
        return f"jsw.{self.app}.sched.at.{queue}.{due_ms}.{job_id}"

    def delayed_filter(self, queue: str = "*", job_id: str = "*") -> str:
        """Filter of the delayed jobs of ``queue`` (all when ``*``), or of one job id."""
        if job_id != "*":
            return f"jsw.{self.app}.sched.at.{queue}.*.{job_id}"
        return f"jsw.{self.app}.sched.at.{queue}.>"

    def parse_delayed_subject(self, subject: str) -> tuple[str, int, str] | None:
        """``(queue, due_ms, job_id)`` of a delayed job's schedule subject, None otherwise."""
        return self._parse_due(subject, "sched.at")

    def _parse_due(self, subject: str, kind: str) -> tuple[str, int, str] | None:
        prefix = f"jsw.{self.app}.{kind}."
        parts = subject[len(prefix) :].split(".") if subject.startswith(prefix) else []
        if len(parts) != 3 or not parts[0] or not parts[1].isdigit() or not parts[2]:
            return None
        return parts[0], int(parts[1]), parts[2]

    def periodic_subject(self, name: str) -> str:
        """Subject of periodic schedule ``name``."""
        return f"jsw.{self.app}.sched.repeat.{name}"

    @property
    def periodic_filter(self) -> str:
        """Wildcard covering every periodic schedule of the app."""
        return f"jsw.{self.app}.sched.repeat.*"

    def parse_periodic_subject(self, subject: str) -> str | None:
        """The schedule name of a periodic schedule subject, None otherwise."""
        parts = subject.split(".")
        if len(parts) != 5 or parts[:4] != ["jsw", self.app, "sched", "repeat"]:
            return None
        return parts[4]

    @property
    def sinks_stream(self) -> str:
        """Stream of the micro-batches Spark streaming sinks committed (one message each)."""
        return f"{self.stream}_SINKS"

    def sink_subject(self, batch: str = "*") -> str:
        """Subject of a committed micro-batch's record (``*``: all of them)."""
        return f"jsw.{self.app}.sink.{batch}"

    @property
    def leases_stream(self) -> str:
        """Stream of the partition leases (one message a lease, with a time to live)."""
        return f"{self.stream}_LEASES"

    @property
    def lease_subjects(self) -> str:
        """Wildcard covering every partition lease of the app."""
        return f"jsw.{self.app}.lease.>"

    @property
    def rates_stream(self) -> str:
        """Stream of the rate limits' counters (a counter a limit and window)."""
        return f"{self.stream}_RATES"

    def rate_subject(self, scope: str = "*", window: int | str = "*") -> str:
        """The counter of rate limit ``scope`` (``q-<queue>``, ``t-<task>``) in ``window``;
        with the defaults, every counter (``>``)."""
        if scope == "*" and window == "*":
            return f"jsw.{self.app}.rate.>"
        return f"jsw.{self.app}.rate.{scope}.{window}"

    @property
    def tally_stream(self) -> str:
        """Stream of the workflows' tallies: how many members of a group have ended."""
        return f"{self.stream}_TALLY"

    def tally_subject(self, flow_id: str = "*") -> str:
        """The counter of workflow ``flow_id``'s ended members (``*``: every workflow's)."""
        return f"jsw.{self.app}.tally.{flow_id}"

    @property
    def flow_subjects(self) -> str:
        """Wildcard covering every workflow subject of the app (in the job stream): their
        definitions, states and group members' results."""
        return f"jsw.{self.app}.flow.>"

    def claim_subject(self, job_id: str, due_ms: int) -> str:
        """Subject of the claim on the firing of ``job_id`` due at ``due_ms``."""
        return f"jsw.{self.app}.claim.{job_id}.{due_ms}"

    def handback_subject(self, stream_seq: int, partition: int = 0) -> str:
        """Subject (in the claims stream) counting how often the job at ``stream_seq`` of the
        job stream of ``partition`` was given back unfinished by a stopping worker; a claim's
        second token is a number, never ``back`` (``back<k>`` past partition 0)."""
        return f"jsw.{self.app}.claim.{stream_seq}.back{partition or ''}"

    @property
    def jobs_bucket(self) -> str:
        """The key-value bucket of job records (results and lifecycle states), keyed by job id."""
        return f"jsw_{self.app}_jobs"

    @property
    def jobs_stream(self) -> str:
        """The stream behind :attr:`jobs_bucket`."""
        return _kv_stream(self.jobs_bucket)

    def record_subject(self, job_id: str = ">") -> str:
        """Subject of the record of ``job_id`` in :attr:`jobs_bucket` (``>``: all of them)."""
        return _kv_subject(self.jobs_bucket, job_id)

    @property
    def workers_bucket(self) -> str:
        """The key-value bucket of live worker processes (the worker registry), keyed by worker id."""
        return f"jsw_{self.app}_workers"

    @property
    def workers_stream(self) -> str:
        """The stream behind :attr:`workers_bucket`."""
        return _kv_stream(self.workers_bucket)

    def worker_subject(self, worker_id: str = ">") -> str:
        """Subject of the entry of worker ``worker_id`` in :attr:`workers_bucket` (``>``: all of them)."""
        return _kv_subject(self.workers_bucket, worker_id)

    def ask_subject(self, question: str, job_id: str = "*") -> str:
        """Subject on which the workers answer ``question`` (``status``, ``cancel``) about job
        ``job_id``, for users that may not read the job stream or cancel on their own."""
        return f"jsw.{self.app}.ask.{question}.{job_id}"

    def worker_ask_subject(self, worker_id: str = "*", question: str = "*") -> str:
        """Subject on which worker ``worker_id`` alone answers ``question`` (``quiet``,
        ``stop``): a token more than :meth:`ask_subject`'s, so that no question about a job
        reaches it, and it reaches no other worker."""
        return f"jsw.{self.app}.ask.worker.{worker_id}.{question}"

    def halt_subject(self, job_id: str = "*") -> str:
        """Subject on which the workers hear that job ``job_id`` was cancelled, so that the
        one holding it drops or stops it (after checking with the server)."""
        return f"jsw.{self.app}.halt.{job_id}"

    def held_subject(self, job_id: str = "*") -> str:
        """Subject on which the worker running job ``job_id`` says so (its id, when it started
        it, which attempt): the details of a running job's status."""
        return f"jsw.{self.app}.held.{job_id}"

    @property
    def inbox_prefix(self) -> str:
        """The default prefix of the app's reply inboxes; a connection of role ``r`` gets its
        replies under ``<prefix>.<r>.>``. Outside ``_INBOX.``, which every client may be
        allowed, so that permissions can keep apps and roles apart."""
        return f"_jsw_inbox.{self.app}"

    @property
    def depth_stream(self) -> str:
        """Name of the stream of the queues' depth samples (with job events on)."""
        return f"JSW_{self.app.upper()}_DEPTH"

    @property
    def depth_subjects(self) -> str:
        """Wildcard covering the queue-depth samples (``...depth.<queue>``)."""
        return f"jsw.{self.app}.depth.>"

    def depth_subject(self, queue: str = "*") -> str:
        """Subject of ``queue``'s depth samples (every queue's when ``*``)."""
        return f"jsw.{self.app}.depth.{queue}"

    def event_subject(self, queue: str, task: str, event: str) -> str:
        """Subject of a job event (``started``, ``succeeded``, ...) of ``task`` on ``queue``."""
        return f"jsw.{self.app}.ev.{queue}.{task}.{event}"

    def queue_filter(self, queue: str, partition: int = 0) -> str:
        """Filter subject of a queue's durable consumer (on the stream of ``partition``)."""
        return f"jsw.{self.app}.{_queued(partition)}.{queue}.>"

    def job_subject(self, queue: str, task: str, job_id: str | None = None, partition: int = 0) -> str:
        """Subject a job of ``task`` on ``queue`` is published to: ``...q.<queue>.<task>.<job id>``
        in partition 0, ``...q<k>.<queue>.<task>.<job id>`` in partition ``k``.

        The job id as the last token lets the server find a waiting or running job by its id
        (status, cancel) and refuse a second one with the same id (unique jobs) without any
        record of jsworker's own. Without ``job_id``, the subject a periodic tick is fired to:
        its id is only known when it fires.
        """
        if job_id is None:
            return f"jsw.{self.app}.{_queued(partition)}.{queue}.{task}"
        return f"jsw.{self.app}.{_queued(partition)}.{queue}.{task}.{job_id}"

    def job_filter(self, job_id: str, partition: int = 0) -> str:
        """Filter matching the job ``job_id`` on any queue of ``partition``, while it waits or runs."""
        return f"jsw.{self.app}.{_queued(partition)}.*.*.{job_id}"

    @property
    def intake_subjects(self) -> str:
        """Wildcard covering the intake of every fair queue: ``...in.<queue>.<task>.<job id>``,
        where a fair queue's jobs wait for their partition's turn (:mod:`jsworker._limits.fair`)."""
        return f"jsw.{self.app}.in.>"

    def intake_subject(self, queue: str, task: str, job_id: str) -> str:
        """Subject a job of ``task`` for fair queue ``queue`` waits on for its turn."""
        return f"jsw.{self.app}.in.{queue}.{task}.{job_id}"

    def intake_filter(self, queue: str | None = None, job_id: str = "*", task: str | None = None) -> str:
        """Filter matching the jobs waiting for their turn (on ``queue``, or any; of ``task``,
        or any; ``job_id``)."""
        return f"jsw.{self.app}.in.{queue or '*'}.{task or '*'}.{job_id}"

    def moved_subject(self, intake_subject: str) -> str:
        """The job subject a job waiting on ``intake_subject`` goes to when its turn comes."""
        prefix = f"jsw.{self.app}.in."
        if not intake_subject.startswith(prefix):
            raise ValueError(f"not an intake subject of app {self.app}: {intake_subject}")
        return f"jsw.{self.app}.q.{intake_subject[len(prefix) :]}"

    def dlq_subject(self, queue: str, task: str) -> str:
        """Subject a dead letter of ``task`` on ``queue`` is stored under."""
        return f"jsw.{self.app}.dlq.{queue}.{task}"

    def parse_job_subject(self, subject: str) -> tuple[str, str] | None:
        """Return ``(queue, task)`` from a job subject (with or without the job id token),
        or None when it is not one of ours."""
        return self._parse(subject, "q", with_id=True)

    def parse_mark_subject(self, subject: str) -> tuple[str, str] | None:
        """Return ``(queue, task)`` from a marker's subject, or None when it is not one."""
        return self._parse(subject, "mark", with_id=True)

    def parse_intake_subject(self, subject: str) -> tuple[str, str] | None:
        """Return ``(queue, task)`` from an intake subject, or None when it is not one."""
        return self._parse(subject, "in", with_id=True)

    def parse_dlq_subject(self, subject: str) -> tuple[str, str] | None:
        """Return ``(queue, task)`` from a dead-letter subject, or None when it is not one."""
        return self._parse(subject, "dlq")

    def _parse(self, subject: str, kind: str, with_id: bool = False) -> tuple[str, str] | None:
        parts = subject.split(".")
        if not (len(parts) == 5 or (with_id and len(parts) == 6 and parts[5])):
            return None
        if parts[0] != "jsw" or parts[1] != self.app:
            return None
        # A job subject's kind is "q" in partition 0, "q<k>" in partition k.
        if parts[2] != kind and not (kind == "q" and parts[2][:1] == "q" and parts[2][1:].isdigit()):
            return None
        if not parts[3] or not parts[4]:
            return None
        return parts[3], parts[4]


def place_token(seq: int, partition: int) -> str:
    """How processes name a job's message to each other (a cancel telling its holder, a status
    asking who holds it): its sequence, then its partition after a dot when not 0."""
    return f"{seq}.{partition}" if partition else str(seq)


def parse_place(token: str) -> tuple[int, int] | None:
    """``(partition, seq)`` of a :func:`place_token`, or None when it is not one."""
    seq, _, partition = token.partition(".")
    if not seq.isdigit() or not (partition.isdigit() or partition == ""):
        return None
    return int(partition or 0), int(seq)


def _queued(partition: int) -> str:
    # The kind token of a job subject: "q" for partition 0 (the layout of an app with one),
    # "q<k>" for the others, which no other subject of the app's has as its kind.
    return "q" if partition == 0 else f"q{partition}"


def _kv_stream(bucket: str) -> str:
    # How NATS names a key-value bucket's stream and its keys' subjects, so that `nats kv`
    # reads jsworker's buckets too.
    return f"KV_{bucket}"


def _kv_subject(bucket: str, key: str) -> str:
    return f"$KV.{bucket}.{key}"
