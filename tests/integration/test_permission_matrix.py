"""The permission matrix: for every role of app ``perm`` and every subject family of ``perm``
and of ``other``, what the real server decides equals what :func:`jsworker._core.permissions.permissions`
says.

Each family has one sample subject here, and every JetStream API call and acknowledgement is a
row for every stream either app can have. Each role is checked for:

* ``publish`` of every sample (API calls as requests with the role's own inbox as reply);
* ``publish, reply <subject>``: the same with a reply subject the role does not own (another
  app's inbox, another role's, another app's job record): a reply subject widens nothing;
* ``subscribe`` to every sample but the API calls, and to a few wildcards;
* for a role that answers questions (NATS ``allow_responses``), ``answer while asked``: being
  asked with a reply subject lets it publish there once, and nowhere else.

The expected outcome of each is computed from the role's allow lists by NATS subject matching,
and the role belongs to ``perm`` only, so every check on ``other`` is refused. The table of
families is checked for completeness first: a subject some grant names, a subject the app's
:class:`~jsworker._wire.names.Namespace` makes or a stream the app can have that no row covers fails
the test, naming it, so a new family cannot go unchecked.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg

from jsworker import App
from jsworker._core.permissions import grants, inbox_role, permissions
from jsworker._registry.entries import workers_bucket_spec
from jsworker._wire.names import ROLES, Namespace, Role
from jsworker.testing import NatsServer

from ..support import wait_until_async
from .secured import PASSWORD

APP, OTHER = "perm", "other"
Verdict = Literal["allowed", "refused"]
# A server newer than any feature: every stream the app can have.
NEWEST = (99, 0, 0)
#: App ``perm`` spreads its queues over two job streams (``App(partitions=2)``).
PARTITIONS = 2
DUE = "1700000000000"


@dataclass(frozen=True, slots=True)
class Sample:
    """One concrete subject of a family of ``app``; ``api``: a JetStream API call or
    acknowledgement, which is only published."""

    app: str
    family: str
    subject: str
    api: bool = False


def families(app: str) -> list[Sample]:
    """One sample subject per subject family of ``app`` (API calls apart)."""
    rows = {
        "job": f"jsw.{app}.q.default.add.x",
        "job of partition 1": f"jsw.{app}.q1.default.add.x",
        "tick": f"jsw.{app}.q.default.add",
        "delayed job": f"jsw.{app}.later.default.{DUE}.x",
        "unique key marker": f"jsw.{app}.mark.default.add.x",
        "delayed schedule": f"jsw.{app}.sched.at.default.{DUE}.x",
        "periodic schedule": f"jsw.{app}.sched.repeat.x",
        "fired job": f"jsw.{app}.fired.default.add",
        "fired job with key": f"jsw.{app}.fired.default.add.k",
        "workflow definition": f"jsw.{app}.flow.def.x",
        "workflow state": f"jsw.{app}.flow.state.x",
        "workflow member result": f"jsw.{app}.flow.done.x.0",
        "fair intake": f"jsw.{app}.in.default.add.x",
        "dead letter": f"jsw.{app}.dlq.default.add",
        "depth sample": f"jsw.{app}.depth.default",
        **{
            f"{kind} event": f"jsw.{app}.ev.default.add.{kind}"
            for kind in ("enqueued", "scheduled", "cancelled")
        },
        "started event": f"jsw.{app}.ev.default.add.started",
        "claim": f"jsw.{app}.claim.x.{DUE}",
        "hand-back count": f"jsw.{app}.claim.1.back",
        "tally": f"jsw.{app}.tally.x",
        "rate counter": f"jsw.{app}.rate.q-default.1",
        "lease": f"jsw.{app}.lease.default.p",
        "sink batch": f"jsw.{app}.sink.x",
        "job record": f"$KV.jsw_{app}_jobs.x",
        "registry entry": f"$KV.jsw_{app}_workers.x",
        **{
            f"ask {q}": f"jsw.{app}.ask.{q}.x"
            for q in ("status", "cancel", "pause", "resume", "schedule", "limits", "unknown")
        },
        **{f"ask a worker {q}": f"jsw.{app}.ask.worker.w1.{q}" for q in ("quiet", "stop", "unknown")},
        "halt": f"jsw.{app}.halt.x",
        "held": f"jsw.{app}.held.x",
        # The subject cancels once went to: nobody may use it any more.
        "old cancel": f"jsw.{app}.cancel.x",
        **{f"{role} inbox": f"_jsw_inbox.{app}.{role}.x" for role in ROLES},
    }
    return [Sample(app, family, subject) for family, subject in rows.items()]


def streams(app: str) -> dict[str, str]:
    """Every stream ``app`` can have, with the family of a subject it holds."""
    ns = Namespace(app)
    return {
        ns.stream: "job",
        ns.partition_stream(1): "job of partition 1",
        ns.schedules_stream: "delayed schedule",
        ns.dlq_stream: "dead letter",
        ns.events_stream: "started event",
        ns.depth_stream: "depth sample",
        ns.claims_stream: "claim",
        ns.tally_stream: "tally",
        ns.rates_stream: "rate counter",
        ns.leases_stream: "lease",
        ns.sinks_stream: "sink batch",
        ns.jobs_stream: "job record",
        ns.workers_stream: "registry entry",
    }


STREAM_CALLS = ("INFO", "CREATE", "UPDATE", "DELETE", "PURGE", "MSG.GET", "MSG.DELETE", "SNAPSHOT", "RESTORE")
CONSUMER_CALLS = ("INFO", "DELETE", "MSG.NEXT", "PAUSE", "DURABLE.CREATE", "LEADER.STEPDOWN", "RESET")
#: Consumers with grants of their own (the relays', which workers may reset), besides ``c``.
NAMED_CONSUMERS = ("_jsw_later", "_jsw_fired")


def api_calls(app: str) -> list[Sample]:
    """Every JetStream API call and acknowledgement on every stream of ``app``."""
    held = {s.family: s.subject for s in families(app)}
    rows: list[Sample] = []
    for stream, family in streams(app).items():
        subject = held[family]
        calls = {
            **{f"STREAM.{call}": f"$JS.API.STREAM.{call}.{stream}" for call in STREAM_CALLS},
            "DIRECT.GET": f"$JS.API.DIRECT.GET.{stream}",
            "DIRECT.GET by subject": f"$JS.API.DIRECT.GET.{stream}.{subject}",
            "CONSUMER.CREATE": f"$JS.API.CONSUMER.CREATE.{stream}",
            "CONSUMER.CREATE named": f"$JS.API.CONSUMER.CREATE.{stream}.c",
            "CONSUMER.CREATE filtered": f"$JS.API.CONSUMER.CREATE.{stream}.c.{subject}",
            **{f"CONSUMER.{call}": f"$JS.API.CONSUMER.{call}.{stream}.c" for call in CONSUMER_CALLS},
            **{
                f"CONSUMER.RESET {name}": f"$JS.API.CONSUMER.RESET.{stream}.{name}"
                for name in NAMED_CONSUMERS
            },
            "CONSUMER.LIST": f"$JS.API.CONSUMER.LIST.{stream}",
            "CONSUMER.NAMES": f"$JS.API.CONSUMER.NAMES.{stream}",
            "ACK": f"$JS.ACK.{stream}.c.1.1.1.1700000000000000000.0",
        }
        rows += [Sample(app, f"{call} {stream}", s, api=True) for call, s in calls.items()]
    return rows


#: What belongs to no app: nats-py's shared inbox and the account-wide API calls.
SHARED = (
    Sample("", "shared inbox", "_INBOX.x"),
    *(
        Sample("", call, f"$JS.API.{call}", api=True)
        for call in ("INFO", "STREAM.NAMES", "STREAM.LIST", "STREAM.CREATE.JSW_NEW")
    ),
)

#: Wildcard subscriptions: whole apps, every inbox, one role's inboxes, every record, everything.
WIDE = (
    *(
        Sample(app, f"wildcard {subject}", subject.format(app=app))
        for app in (APP, OTHER)
        for subject in (
            "jsw.{app}.>",
            "jsw.{app}.ask.*.*",
            "jsw.{app}.ask.>",
            "_jsw_inbox.{app}.>",
            "_jsw_inbox.{app}.producer.>",
            "$KV.jsw_{app}_jobs.>",
            "$KV.jsw_{app}_jobs.*",
        )
    ),
    *(Sample("", f"wildcard {subject}", subject) for subject in (">", "$KV.>", "_INBOX.>")),
)


def samples() -> list[Sample]:
    """Every row, of both apps."""
    return [*families(APP), *api_calls(APP), *families(OTHER), *api_calls(OTHER), *SHARED]


# -- NATS subject matching -----------------------------------------------------------------


def matches(subject: str, pattern: str) -> bool:
    """Whether every subject ``subject`` stands for (it may hold wildcards itself) is one
    ``pattern`` matches: ``*`` one token, ``>`` one or more at the end."""
    tokens, wanted = subject.split("."), pattern.split(".")
    for i, want in enumerate(wanted):
        if want == ">":
            return len(tokens) > i
        if i >= len(tokens) or tokens[i] == ">" or (want != "*" and want != tokens[i]):
            return False
    return len(tokens) == len(wanted)


def test_subject_matching() -> None:
    """The matching the expected outcomes are computed with."""
    assert matches("jsw.perm.q.default.add.x", "jsw.perm.q.>")
    assert matches("jsw.perm.ask.status.x", "jsw.perm.ask.*.*")
    assert matches("jsw.perm.ask.*.*", "jsw.perm.ask.*.*")
    assert matches("$KV.jsw_perm_jobs.*", "$KV.jsw_perm_jobs.>")
    assert not matches("jsw.perm.q", "jsw.perm.q.>")
    assert not matches("jsw.perm.ask.>", "jsw.perm.ask.*.*")
    assert not matches("jsw.perm.ask.status", "jsw.perm.ask.*.*")
    assert not matches("jsw.perm.ask.status.x.y", "jsw.perm.ask.*.*")
    assert not matches("jsw.other.q.default.add.x", "jsw.perm.q.>")


# -- completeness --------------------------------------------------------------------------


def _full_app(name: str) -> App:
    """App ``name`` with every feature that adds a stream switched on."""
    app = App(name, events=True, workflows=True, spark_sinks=True, partitions=PARTITIONS)
    app.queue("fair", fair=True)
    app.queue("limited", rate_limit="5/s")

    @app.task(queue="fair", partition_key=lambda account: account, max_running_per_partition=1,
              rate_limit_per_partition="1/s")  # fmt: skip
    async def each(account: str) -> None: ...

    return app


def namespace_subjects(ns: Namespace) -> set[str]:
    """Every subject (pattern) ``ns`` makes: its properties, and its methods called with ``*``
    for each argument they need (those that accept it)."""
    made: set[object] = set()
    for name, member in inspect.getmembers(type(ns)):
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            made.add(getattr(ns, name))
        elif inspect.isfunction(member):
            needed = [
                p for p in list(inspect.signature(member).parameters.values())[1:] if p.default is p.empty
            ]
            try:
                made.add(member(ns, *["*"] * len(needed)))
            except ValueError:  # parses or swaps only subjects of its own kind
                continue
    return {s for s in made if isinstance(s, str) and s.startswith(f"jsw.{ns.app}.")}


def uncovered(app: str, rows: Sequence[Sample], table: dict[str, str] | None = None) -> list[str]:
    """What ``app`` has that no row of ``rows`` or of ``table`` (its :func:`streams`) covers:
    grant subjects, subjects its namespace makes, streams it can have (and rows for streams
    it cannot), each named."""
    subjects = [s.subject for s in rows if s.app == app]
    missing = [
        f"grant {g.subject} ({g.why})"
        for g in grants(app, partitions=PARTITIONS)
        if not any(matches(subject, g.subject) for subject in subjects)
    ]
    missing += [
        f"namespace subject {pattern}"
        for pattern in sorted(namespace_subjects(Namespace(app)))
        if not any(matches(subject, pattern) for subject in subjects)
    ]
    full = _full_app(app)
    specs = [*full.stream_specs(NEWEST), workers_bucket_spec(full.namespace, 1)]
    table = streams(app) if table is None else table
    missing += [f"stream {spec.name}" for spec in specs if spec.name not in table]
    missing += [
        f"row for stream {name}, which the app cannot have" for name in set(table) - {s.name for s in specs}
    ]
    held = {s.family: s.subject for s in families(app)}
    missing += [
        f"stream {spec.name} holding {held[table[spec.name]]}"
        for spec in specs
        if spec.name in table and not any(matches(held[table[spec.name]], p) for p in spec.subjects)
    ]
    return missing


def test_every_family_has_a_row() -> None:
    """Every subject a grant names or the namespace makes, and every stream, of either app, is
    covered by a row: a new family fails here until it gets one."""
    assert {app: uncovered(app, samples()) for app in (APP, OTHER)} == {APP: [], OTHER: []}


def test_a_family_without_a_row_is_named() -> None:
    """The completeness check catches what it is for: drop the rows of one family and of one
    stream, and each is named."""
    rows = [s for s in samples() if s.family != "tally" and "JSW_PERM_LEASES" not in s.family]
    table = {name: family for name, family in streams(APP).items() if name != "JSW_PERM_LEASES"}
    missing = uncovered(APP, rows, table)
    assert any(m.startswith("grant jsw.perm.tally.*") for m in missing), missing
    assert "namespace subject jsw.perm.tally.*" in missing, missing
    assert any(m.startswith("grant $JS.API.DIRECT.GET.JSW_PERM_LEASES") for m in missing), missing
    assert "stream JSW_PERM_LEASES" in missing, missing


# -- the matrix ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Check:
    """One operation of ``role`` on ``sample``; ``reply``: the reply subject it publishes with."""

    role: Role
    operation: str
    sample: Sample
    reply: str = ""


#: The subject a role that answers is asked on, and the reply subject the asker names.
QUESTION = f"jsw.{APP}.ask.status.asked"
ASKED = f"_jsw_inbox.{APP}.producer.asked"


def foreign_replies(role: Role) -> list[str]:
    """Reply subjects ``role`` does not own: the other app's inbox for the same role, another
    role's inbox, another app's job record."""
    stranger = "operator" if inbox_role(role) == "worker" else "worker"
    return [
        f"_jsw_inbox.{OTHER}.{inbox_role(role)}.x",
        f"_jsw_inbox.{APP}.{stranger}.x",
        f"$KV.jsw_{OTHER}_jobs.x",
    ]


def phases(role: Role) -> list[list[Check]]:
    """The checks of ``role``, in the order they run: within a phase, no subject twice (the
    server names only the subject it refused)."""
    rows = samples()
    own = f"_jsw_inbox.{APP}.{inbox_role(role)}.x"
    done = [
        [Check(role, "publish", s, own if s.api else "") for s in rows],
        *(
            [Check(role, f"publish, reply {reply}", s, reply) for s in rows]
            for reply in foreign_replies(role)
        ),
    ]
    if permissions(APP, role, partitions=PARTITIONS).answers:
        # Before the subscriptions: nats-server refuses the answer of a user that received
        # the question on two subscriptions.
        answer = Sample(APP, "asked reply", ASKED)
        done += [
            [*(Check(role, "answer while asked", s) for s in rows), Check(role, "answer", answer)],
            [Check(role, "second answer", answer)],
        ]
    return [*done, [Check(role, "subscribe", s) for s in (*rows, *WIDE) if not s.api]]


def expected(check: Check) -> Verdict:
    """What the role table says of ``check``."""
    perms = permissions(APP, check.role, partitions=PARTITIONS)
    allowed = perms.subscribe if check.operation == "subscribe" else perms.publish
    if check.operation == "answer" and perms.answers:
        return "allowed"
    return "allowed" if any(matches(check.sample.subject, p) for p in allowed) else "refused"


#: A subject no grant names: its refusal marks where a connection's earlier refusals end.
SENTINEL = "_jsw_matrix.sentinel"
_REFUSAL = re.compile(r'permissions violation for (publish|subscription) to "([^"]+)"')


def _refusals(errors: Iterable[str]) -> set[tuple[str, str]]:
    """The operations (``publish``, ``subscription``) and subjects ``errors`` refuse; the server
    names subjects in their case, nats-py lowers it."""
    return {(found[1], found[2]) for found in map(_REFUSAL.search, errors) if found is not None}


class _Connection:
    """A connection of user ``perm-<role>`` and the errors the server sent it."""

    def __init__(self, role: Role) -> None:
        self.user = f"{APP}-{role}"
        self.errors: list[str] = []
        self.settled = 0
        self.nc = Client()

    async def open(self, url: str) -> None:
        async def on_error(exc: Exception) -> None:
            self.errors.append(str(exc))

        await self.nc.connect(url, user=self.user, password=PASSWORD.format(self.user), error_cb=on_error,
                              allow_reconnect=False, name=f"matrix:{self.user}")  # fmt: skip

    async def settle(self) -> list[str]:
        """The errors sent since the last call, once the server has handled all that was sent
        before: it handles a connection's messages in order and refuses each as it comes, so
        the refusal of a subject no role may publish to, sent last, comes after them. (A flush
        is no such mark: nats-py writes its ping ahead of what it has buffered.)"""
        sentinel = f"{SENTINEL}.{self.settled}"
        await self.nc.publish(sentinel)
        await wait_until_async(
            lambda: ("publish", sentinel) in _refusals(self.errors[self.settled :]),
            timeout=10,
            message=f"the refusal of {sentinel} to {self.user}",
        )
        since, self.settled = self.errors[self.settled :], len(self.errors)
        return [e for e in since if _refusals([e]) != {("publish", sentinel)}]


async def _observe(url: str, role: Role, asker: Client) -> tuple[dict[Check, Verdict], list[str]]:
    """Run every check of ``role``, phase by phase, over one connection: its verdicts, and the
    errors the server sent that name no refused subject."""
    conn = _Connection(role)
    await conn.open(url)
    observed: dict[Check, Verdict] = {}
    stray: list[str] = []
    try:
        for phase in phases(role):
            if phase[0].operation == "answer while asked":
                await _be_asked(conn, asker)
            for check in phase:
                if check.operation == "subscribe":
                    await conn.nc.subscribe(check.sample.subject)
                else:
                    await conn.nc.publish(check.sample.subject, b"{", reply=check.reply)
            errors = await conn.settle()
            refused = _refusals(errors)
            stray += [e for e in errors if not _refusals([e])]
            for check in phase:
                kind = "subscription" if check.operation == "subscribe" else "publish"
                observed[check] = "refused" if (kind, check.sample.subject.lower()) in refused else "allowed"
        assert conn.nc.is_connected, f"{conn.user} was disconnected: {conn.errors[-3:]}"
    finally:
        await conn.nc.close()
    return observed, stray


async def _be_asked(conn: _Connection, asker: Client) -> None:
    """Have ``conn`` receive a question whose reply subject is :data:`ASKED`, as a producer
    asks."""
    got: list[Msg] = []

    async def on_question(msg: Msg) -> None:
        got.append(msg)

    await conn.nc.subscribe(QUESTION, cb=on_question)
    assert await conn.settle() == []
    await asker.publish(QUESTION, b"", reply=ASKED)
    await wait_until_async(lambda: [m.reply for m in got] == [ASKED], timeout=10, message="the question")


def test_every_role_gets_exactly_what_the_role_table_says(secured: NatsServer) -> None:
    """Every check of every role against the server the printed permissions configure: the
    observed matrix equals the computed one, every mismatch listed at once."""
    matrix = {check: expected(check) for role in ROLES for phase in phases(role) for check in phase}
    # The roles are ``perm``'s: the computation itself must refuse them all of ``other``; and
    # it must allow something, or the matrix would only show that the server refuses.
    assert not [c for c, v in matrix.items() if c.sample.app == OTHER and v == "allowed"]
    assert set(matrix.values()) == {"allowed", "refused"}
    # The server names the refused subject only: each subject once a phase.
    for role in ROLES:
        for phase in phases(role):
            assert len({c.sample.subject.lower() for c in phase}) == len(phase), (role, phase[0].operation)

    async def scenario() -> tuple[dict[Check, Verdict], list[str]]:
        # A producer asks the question an answering role receives; the roles run one after
        # the other, so no role receives another's messages (and with them, leave to answer).
        asker = await nats.connect(
            secured.url, user=f"{APP}-producer", password=PASSWORD.format(f"{APP}-producer")
        )
        seen: dict[Check, Verdict] = {}
        stray: list[str] = []
        try:
            for role in ROLES:
                verdicts, errors = await _observe(secured.url, role, asker)
                seen.update(verdicts)
                stray += [f"{role}: {e}" for e in errors]
        finally:
            await asker.close()
        return seen, stray

    observed, stray = asyncio.run(scenario())
    assert not stray, stray
    assert observed.keys() == matrix.keys()
    mismatches = [
        f"{c.role} {c.operation} {c.sample.subject} ({c.sample.family}): expected {matrix[c]}, observed {v}"
        for c, v in observed.items()
        if v != matrix[c]
    ]
    assert not mismatches, "\n".join([f"{len(mismatches)} of {len(matrix)} checks differ:", *mismatches])
