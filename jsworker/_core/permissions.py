"""The NATS permissions each role of an app needs, each grant with the feature it serves.

Six roles use an app (see :data:`~jsworker._wire.names.ROLES`):

* **producer** only adds work: it enqueues jobs and delayed jobs, watches and reads job
  records (results) by job id, and asks the workers for a job's status. It cannot read or
  delete a job message, write a record, a claim or a schedule, or cancel. It writes only into
  the job stream, which honours no header that removes or repeats a message (no rollups,
  schedules or per-message TTLs): a delayed job waits there until a worker makes it a
  one-shot schedule from its subject.
* **canceller** is a producer that may also ask the workers to cancel a job (a web app's
  "cancel" button): nothing else beyond the producer's rights.
* **worker** runs jobs: it checks the app's streams and creates its queue consumers, pulls
  and settles jobs, writes records, claims, dead letters and events, makes delayed jobs
  schedules and moves fired jobs into their queues, installs periodic schedules, keeps its
  registry entry, carries out the cancels, answers the questions of producers and
  dashboards, and hands job records to the app's final-state handlers (through consumers
  only the provisioner makes).
* **operator** looks after an app (``jsworker status``, ``dlq``, ``events``, ``schedules``,
  ``workers``, ``queues``, ``ui``): it reads everything, replays and removes dead letters,
  writes and removes schedules, pauses, resumes and purges queues, and may cancel jobs
  itself. It never pulls from a queue's consumer, so it cannot take a job away from the
  workers.
* **dashboard** is what the web dashboard (``jsworker ui``) connects as: it reads what an
  operator reads, and takes exactly the actions the dashboard offers (pause, resume and purge
  a queue; ask the workers to cancel a job; run a retrying job now; replay and purge dead
  letters; trigger and remove a schedule, and ask the workers to pause or resume one). It
  creates no stream and no queue consumer, pulls no job, writes no record, claim, schedule or
  dead letter, and tells no worker to stop a job (it asks the workers to cancel, as a
  canceller does).
* **provisioner** is the provisioning step (``jsworker provision``), run before the workers:
  the only role that creates and updates the app's streams, and it creates the queue
  consumers. Workers, operators and dashboards cannot change a stream's configuration, so
  none of them can, say, make a stream copy another app's dead letters (a ``source``). No
  role deletes a stream.

Every allow entry is a :class:`Grant` naming why it is there; ``jsworker permissions`` prints
them as a NATS server configuration block, and :func:`role_table` as the table of docs/security.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .._wire.names import ROLES, Namespace, Role
from .layout import FIRED_CONSUMER, LATER_CONSUMER

_API = "$JS.API"
_PROVISIONER: frozenset[Role] = frozenset({"provisioner"})
# Every role that uses the app's jobs: the provisioner only shapes its streams.
_EVERY: frozenset[Role] = frozenset(ROLES) - _PROVISIONER
# Every role but the dashboard starts work: it only enqueues again what is there already.
_PRODUCING: frozenset[Role] = frozenset({"producer", "canceller", "worker", "operator"})
_TRUSTED: frozenset[Role] = frozenset({"worker", "operator"})
# Who reads the app's streams' configuration: workers check theirs at start.
_CHECKING: frozenset[Role] = frozenset({"worker", "operator", "provisioner"})
# Workers create their queues' consumers themselves: a new queue comes with new code, and
# workers of that code must not wait for a provisioning step to serve it. A consumer's
# settings are the worker's own (ack wait, max running) and reach no other stream.
_CONSUMING: frozenset[Role] = frozenset({"worker", "provisioner"})
_WORKER: frozenset[Role] = frozenset({"worker"})
_OPERATOR: frozenset[Role] = frozenset({"operator"})
_CANCELLING: frozenset[Role] = frozenset({"canceller", "worker", "operator", "dashboard"})
_READERS: frozenset[Role] = frozenset({"producer", "canceller", "operator"})
# Who reads the job stream and acts on single messages of it: workers, operators, dashboards.
_LOOKING: frozenset[Role] = frozenset({"worker", "operator", "dashboard"})
# Who looks after an app: its operators, and the dashboard with only its own actions.
_OPERATING: frozenset[Role] = frozenset({"operator", "dashboard"})
_DASHBOARD: frozenset[Role] = frozenset({"dashboard"})


@dataclass(frozen=True, slots=True)
class Grant:
    """One allow entry: ``subject`` may be published to (or subscribed on, when
    ``subscribe``) by ``roles``, because ``why``."""

    subject: str
    why: str
    roles: frozenset[Role]
    subscribe: bool = False


def grants(app: str, inbox_prefix: str | None = None, partitions: int = 1) -> list[Grant]:
    """Every allow entry of every role of app ``app`` whose queues have at most ``partitions``
    partitions, in the order they are printed."""
    ns = Namespace(app)
    prefix = inbox_prefix or ns.inbox_prefix
    kv, claims, sched = ns.jobs_stream, ns.claims_stream, ns.schedules_stream
    dlq, events, registry, sinks = ns.dlq_stream, ns.events_stream, ns.workers_stream, ns.sinks_stream
    # Every job stream is granted alike: a partition's is its queues' jobs, as the first one's.
    job_streams = [ns.partition_stream(k) for k in range(partitions)]
    streams = (
        *job_streams, sched, ns.dlq_stream, ns.events_stream, ns.depth_stream, claims, kv, registry,
        ns.tally_stream, ns.rates_stream, ns.leases_stream, sinks,
    )  # fmt: skip
    kept = (dlq, events)
    depth = ns.depth_stream
    return [
        # -- replies ---------------------------------------------------------------------
        *(
            Grant(f"{prefix}.{inbox_role(role)}.>", "replies to its own requests", frozenset({role}), True)
            for role in ROLES
        ),
        # -- what every role does --------------------------------------------------------
        *(
            Grant(
                ns.partition_subjects(k),
                "enqueue jobs (workers from tasks; operators and dashboards replaying dead letters, running "
                "a retrying job now, triggering a schedule)",
                _EVERY,
            )
            for k in range(partitions)
        ),
        Grant(
            ns.intake_subjects,
            "enqueue jobs for fair queues (they wait in its intake for their partition's turn)",
            _PRODUCING,
        ),
        Grant(
            ns.later_subjects,
            "enqueue delayed jobs (a worker makes each a one-shot schedule from its subject)",
            _PRODUCING,
        ),
        Grant(
            f"jsw.{ns.app}.flow.def.*",
            "start workflows (`App(workflows=True)`): a definition, stored once with the first jobs",
            _PRODUCING,
        ),
        *(
            Grant(
                ns.event_subject("*", "*", kind),
                f"the `{kind}` event of an enqueue (`App(events=True)`)",
                _PRODUCING,
            )
            for kind in ("enqueued", "scheduled")
        ),
        Grant(ns.event_subject("*", "*", "cancelled"), "the `cancelled` event of a cancel", _TRUSTED),
        Grant(
            ns.sink_subject(),
            "record a micro-batch a Spark streaming sink committed (`App(spark_sinks=True)`; a subject "
            "no one derives without the query's id, written once)",
            _PRODUCING,
        ),
        Grant(
            f"{_API}.STREAM.MSG.GET.{sinks}",
            "read whether a Spark streaming sink committed a micro-batch",
            _PRODUCING,
        ),
        Grant(f"{_API}.STREAM.MSG.GET.{kv}", "read a job's record (status, result) by its job id", _EVERY),
        Grant(ns.ask_subject("status"), "ask the workers for a job's status", _PRODUCING),
        Grant(ns.ask_subject("cancel"), "ask the workers to cancel a job", _CANCELLING),
        Grant(
            ns.record_subject(), "watch job records as they are stored (waiting for results)", _READERS, True
        ),
        # -- what workers and operators do -----------------------------------------------
        *(Grant(f"{_API}.STREAM.INFO.{s}", "check the app's streams", _CHECKING) for s in streams),
        *(
            Grant(
                f"{_API}.STREAM.{verb}.{s}",
                "create and update the app's streams (`jsworker provision`; no other role may)",
                _PROVISIONER,
            )
            for s in streams
            for verb in ("CREATE", "UPDATE")
        ),
        *(
            Grant(f"{_API}.STREAM.INFO.{s}", "check the streams it shows (figures, health)", _DASHBOARD)
            for s in (*job_streams, sched, dlq, events, depth)
        ),
        *(
            Grant(f"{_API}.CONSUMER.LIST.{jobs}", "list the queues (status, queue gauges)", _LOOKING)
            for jobs in job_streams
        ),
        *(
            Grant(
                f"{_API}.CONSUMER.INFO.{jobs}.*",
                "read a queue's consumer (status: queued or running)",
                _LOOKING,
            )
            for jobs in job_streams
        ),
        *(
            Grant(
                f"{_API}.STREAM.MSG.GET.{jobs}",
                "read waiting jobs and delayed jobs (status, cancel, the oldest job of a queue)",
                _LOOKING,
            )
            for jobs in job_streams
        ),
        *(
            Grant(
                f"{_API}.STREAM.MSG.DELETE.{jobs}",
                "delete a cancelled job or delayed job, a retrying job's waiting message once it runs now",
                _LOOKING,
            )
            for jobs in job_streams
        ),
        Grant(
            ns.mark_subjects,
            "hold a unique delayed job's key in the job stream while it waits as a schedule (a marker "
            "a unique enqueue's one check sees; operators mark those scheduled by an earlier version)",
            _TRUSTED,
        ),
        Grant(ns.record_subject(), "write job records (results, failures, cancels)", _TRUSTED),
        Grant(ns.claim_subjects, "claim fired jobs and cancelled firings (each firing runs once)", _TRUSTED),
        Grant(f"{_API}.STREAM.MSG.GET.{claims}", "read claims", _TRUSTED),
        Grant(ns.halt_subject(), "tell the worker holding a cancelled job to drop or stop it", _TRUSTED),
        Grant(ns.held_subject(), "ask which worker runs a job (status: running)", _LOOKING),
        Grant(
            ns.schedule_subjects,
            "make delayed jobs schedules; install and pause periodic schedules (the schedules stream "
            "honours rollups: no other role writes it)",
            _TRUSTED,
        ),
        *(
            Grant(f"{_API}.STREAM.{verb}.{sched}", f"{why} (`jsworker schedules`, the dashboard)", _LOOKING)
            for verb, why in (
                ("MSG.GET", "read schedules"),
                ("MSG.DELETE", "remove a schedule: cancelled, left behind after it fired, removed"),
            )
        ),
        *(
            Grant(ns.worker_ask_subject("*", verb), f"ask one worker, by its id, to {why}", _OPERATING)
            for verb, why in (("quiet", "take no new job (before a deploy)"), ("stop", "stop"))
        ),
        Grant(
            ns.ask_subject("limits"),
            "ask the workers to change a queue's max_running or rate limit",
            _OPERATING,
        ),
        Grant(ns.ask_subject("pause"), "ask the workers to pause a periodic schedule", _DASHBOARD),
        Grant(
            ns.ask_subject("schedule"),
            "ask the workers to create or change a schedule the code does not declare",
            _DASHBOARD,
        ),
        Grant(ns.ask_subject("resume"), "ask the workers to resume a periodic schedule", _DASHBOARD),
        Grant(
            f"jsw.{ns.app}.flow.*.>",
            "advance workflows: their states and members' results (each written once, by compare-and-set)",
            _TRUSTED,
        ),
        Grant(ns.tally_subject(), "count the ended members of a workflow's group", _TRUSTED),
        Grant(ns.rate_subject(), "count job starts against rate limits (a counter per window)", _WORKER),
        Grant(ns.lease_subjects, "take and renew partition leases (max_running_per_partition)", _WORKER),
        *(
            Grant(f"{_API}.DIRECT.GET.{ns.leases_stream}{tail}", "read if a lease was given back", _WORKER)
            for tail in ("", ".>")
        ),
        # -- workers ---------------------------------------------------------------------
        Grant(ns.dlq_subjects, "store dead letters", _WORKER),
        Grant(ns.events_subjects, "store job events", _WORKER),
        Grant(
            ns.depth_subjects,
            "sample the queues' depth for the dashboard's chart (`App(events=True)`)",
            _WORKER,
        ),
        Grant(
            ns.worker_subject("*"),
            "its own entry in the worker registry (each process makes up its id)",
            _WORKER,
        ),
        *(
            Grant(f"{_API}.CONSUMER.CREATE.{jobs}.>", "create the queue consumers", _CONSUMING)
            for jobs in job_streams
        ),
        *(
            Grant(
                f"{_API}.CONSUMER.DURABLE.CREATE.{jobs}.*",
                "create the queue consumers (older servers)",
                _CONSUMING,
            )
            for jobs in job_streams
        ),
        *(
            Grant(
                f"{_API}.CONSUMER.INFO.{jobs}.*", "read a queue's consumer before it changes it", _PROVISIONER
            )
            for jobs in job_streams
        ),
        *(Grant(f"{_API}.CONSUMER.MSG.NEXT.{jobs}.*", "pull jobs", _WORKER) for jobs in job_streams),
        *(Grant(f"$JS.ACK.{jobs}.>", "acknowledge, retry and end jobs", _WORKER) for jobs in job_streams),
        *(
            Grant(subject, "create the consumer that moves fired jobs into their queues", _CONSUMING)
            for subject in (f"{_API}.CONSUMER.CREATE.{sched}.>", f"{_API}.CONSUMER.DURABLE.CREATE.{sched}.*")
        ),
        Grant(f"{_API}.CONSUMER.INFO.{sched}.*", "read that consumer before it changes it", _PROVISIONER),
        *(
            Grant(subject, "move fired jobs from the schedules stream into their queues", _WORKER)
            for subject in (f"{_API}.CONSUMER.MSG.NEXT.{sched}.*", f"$JS.ACK.{sched}.>")
        ),
        *(
            Grant(
                f"{_API}.CONSUMER.RESET.{stream}.{consumer}",
                "hand out again the delayed and fired jobs a relay's consumer passed after a "
                "failover (its moves are idempotent; no queue's consumer can be reset)",
                _WORKER,
            )
            for stream, consumer in ((ns.stream, LATER_CONSUMER), (sched, FIRED_CONSUMER))
        ),
        Grant(ns.ask_subject("*"), "answer status and cancel questions", _WORKER, True),
        Grant(ns.worker_ask_subject(), "hear what it is asked by its id (quiet, stop)", _WORKER, True),
        Grant(ns.halt_subject(), "hear of cancelled jobs it may hold", _WORKER, True),
        Grant(ns.held_subject(), "say which jobs it runs", _WORKER, True),
        Grant(
            f"{_API}.CONSUMER.INFO.{kv}.*",
            "check the final-state handlers' consumers (`App(final_states=True)`)",
            _CONSUMING,
        ),
        *(
            Grant(
                subject,
                "create the final-state handlers' consumers (`jsworker provision`; workers only pull "
                "from them, so none can point one elsewhere)",
                _PROVISIONER,
            )
            for subject in (f"{_API}.CONSUMER.CREATE.{kv}.>", f"{_API}.CONSUMER.DURABLE.CREATE.{kv}.*")
        ),
        *(
            Grant(subject, "hand job records to the final-state handlers", _WORKER)
            for subject in (f"{_API}.CONSUMER.MSG.NEXT.{kv}.*", f"$JS.ACK.{kv}.>")
        ),
        # -- operators -------------------------------------------------------------------
        *(Grant(f"{_API}.STREAM.MSG.GET.{s}", "read dead letters and events", _OPERATING) for s in kept),
        *(
            Grant(
                f"{_API}.CONSUMER.{verb}.{s}{tail}",
                "read dead letters, events, queue depth samples and the worker registry through "
                "short-lived consumers",
                _OPERATING,
            )
            for s in (*kept, depth, registry)
            for verb, tail in (
                ("CREATE", ""),
                ("CREATE", ".>"),
                ("INFO", ".*"),
                ("DELETE", ".*"),
                ("MSG.NEXT", ".*"),
            )
        ),
        *(Grant(f"$JS.ACK.{s}.>", "read dead letters and events", _OPERATOR) for s in kept),
        Grant(f"{_API}.STREAM.MSG.DELETE.{dlq}", "remove a dead letter", _OPERATING),
        Grant(f"{_API}.STREAM.PURGE.{dlq}", "purge dead letters", _OPERATING),
        *(
            Grant(
                f"{_API}.CONSUMER.PAUSE.{jobs}.*",
                "pause and resume a queue (its consumer hands out nothing while paused)",
                _OPERATING,
            )
            for jobs in job_streams
        ),
        *(Grant(f"{_API}.STREAM.PURGE.{jobs}", "purge a queue's jobs", _OPERATING) for jobs in job_streams),
    ]


def inbox_role(role: Role) -> Role:
    """The role whose inbox a connection of ``role`` uses: a canceller connects as the
    producer it also is."""
    return "producer" if role == "canceller" else role


@dataclass(frozen=True, slots=True)
class Permissions:
    """What one role of one app may publish to and subscribe on (allow lists: all else is
    denied)."""

    role: Role
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]

    @property
    def answers(self) -> bool:
        """Whether the user may answer the questions it receives: one reply to each reply
        subject a message it got named (NATS ``allow_responses``), nowhere else. Workers answer
        status and cancel questions from users whose inboxes they may not publish to."""
        return self.role == "worker"

    def as_config(self) -> dict[str, Any]:
        """The ``permissions`` block of a NATS user, as a mapping."""
        config: dict[str, Any] = {
            "publish": {"allow": list(self.publish)},
            "subscribe": {"allow": list(self.subscribe)},
        }
        if self.answers:
            config["allow_responses"] = True
        return config


def permissions(app: str, role: Role, inbox_prefix: str | None = None, partitions: int = 1) -> Permissions:
    """The permissions ``role`` needs to use app ``app``; ``inbox_prefix`` is the app's, if it
    set one (``inbox_prefix=``/``JSWORKER_INBOX_PREFIX``); ``partitions``: the most any of its
    queues has."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: use one of {', '.join(ROLES)}")
    mine = [g for g in grants(app, inbox_prefix, partitions) if role in g.roles]
    return Permissions(
        role=role,
        publish=_unique(g.subject for g in mine if not g.subscribe),
        subscribe=_unique(g.subject for g in mine if g.subscribe),
    )


def _unique(subjects: Iterable[str]) -> tuple[str, ...]:
    # A subject two grants share (workers and operators both write records) is listed once.
    return tuple(dict.fromkeys(subjects))


def role_table(inbox_prefix: str | None = None) -> str:
    """The table of every grant (docs/security.md) of an app named ``<app>``: a column a role, a row
    the entries that serve one purpose, and that purpose."""
    rows = [
        f"| subjects | | {' | '.join(ROLES)} | why |",
        "|---|---|" + "---|" * len(ROLES) + "---|",
    ]
    merged: list[tuple[list[str], Grant]] = []
    for g in grants("<app>", inbox_prefix):
        last = merged[-1][1] if merged else None
        if last is not None and (last.why, last.roles, last.subscribe) == (g.why, g.roles, g.subscribe):
            merged[-1][0].append(g.subject)
        else:
            merged.append(([g.subject], g))
    for subjects, g in merged:
        cells = " | ".join("✓" if role in g.roles else "" for role in ROLES)
        listed = "<br>".join(f"`{s}`" for s in subjects)
        rows.append(f"| {listed} | {'sub' if g.subscribe else 'pub'} | {cells} | {g.why} |")
    return "\n".join(rows) + "\n"


def server_config(
    apps: Sequence[str], roles: Sequence[Role] = ROLES, inbox_prefix: str | None = None, partitions: int = 1
) -> str:
    """An ``authorization`` block for a NATS server configuration: for each app, one user per
    role named ``<app>-<role>``, whose password the server reads from the environment variable
    ``<APP>_<ROLE>_PASSWORD`` (so no secret is written in the file)."""
    lines = ["authorization {", "  users = ["]
    for app in apps:
        name = Namespace(app).app
        for role in roles:
            perms = permissions(app, role, inbox_prefix, partitions)
            variable = f"{name.upper().replace('-', '_')}_{role.upper()}_PASSWORD"
            lines.append(f'    {{user: "{name}-{role}", password: ${variable},')
            lines.append(f"     permissions: {json.dumps(perms.as_config())}}}")
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"
