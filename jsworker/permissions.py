"""The NATS permissions each role of an app needs, and nothing more.

Three roles use an app (see :data:`~jsworker.naming.ROLES`):

* **producer** enqueues jobs: it may publish to the app's job subjects and delayed-job
  schedules (and the ``enqueued``, ``scheduled`` and ``cancelled`` job events), look up its
  job stream, and read the replies on its own inbox. For a job's status, result and cancel it
  may read and delete single messages of the job stream, read its queues' consumers, read,
  write and watch job records, announce cancels and write claims. It cannot purge anything,
  read a dead letter or an event, or take another role's replies.
* **worker** runs jobs: it creates and updates the app's streams and its queue consumers,
  pulls and acknowledges jobs, stores dead letters, events and claims, installs periodic
  schedules, keeps its entry in the worker registry, and may enqueue.
* **operator** looks after an app (``jsworker status``, ``dlq``, ``events``, ``schedules``):
  it reads the app's streams and consumers, reads, replays and deletes dead letters, reads
  events and the worker registry (``jsworker workers``), and writes and removes schedules.
  It never pulls from a queue's consumer, so it cannot take a job away from the workers.

The subjects come from the app's names (:class:`~jsworker.naming.Namespace`) and its inbox
prefix, so the permissions follow a renamed app or prefix; ``jsworker permissions`` prints
them as a NATS server configuration block.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from .naming import ROLES, Namespace, Role

_API = "$JS.API"


@dataclass(frozen=True, slots=True)
class Permissions:
    """What one role of one app may publish to and subscribe on (allow lists: all else is
    denied)."""

    role: Role
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]

    def as_config(self) -> dict[str, dict[str, list[str]]]:
        """The ``permissions`` block of a NATS user, as a mapping."""
        return {
            "publish": {"allow": list(self.publish)},
            "subscribe": {"allow": list(self.subscribe)},
        }


def permissions(app: str, role: Role, inbox_prefix: str | None = None) -> Permissions:
    """The permissions ``role`` needs to use app ``app``; ``inbox_prefix`` is the app's, if it
    set one (``inbox_prefix=``/``JSWORKER_INBOX_PREFIX``)."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: use one of {', '.join(ROLES)}")
    ns = Namespace(app)
    inbox = f"{inbox_prefix or ns.inbox_prefix}.{role}.>"
    streams = (
        ns.stream,
        ns.dlq_stream,
        ns.events_stream,
        ns.claims_stream,
        ns.jobs_stream,
        ns.workers_stream,
    )
    # Enqueueing a delayed job, a job's status and result, and cancelling any job, which
    # every role may do.
    delayed = [
        ns.delayed_filter(),
        ns.claim_subjects,
        ns.record_subject(),
        ns.cancel_subject(),
        f"{_API}.STREAM.MSG.GET.{ns.stream}",
        f"{_API}.STREAM.MSG.DELETE.{ns.stream}",
        f"{_API}.STREAM.MSG.GET.{ns.claims_stream}",
        f"{_API}.STREAM.MSG.GET.{ns.jobs_stream}",
        f"{_API}.CONSUMER.INFO.{ns.stream}.*",
    ]
    if role == "producer":
        publish = [
            ns.job_subjects,
            *delayed,
            *(f"jsw.{ns.app}.ev.*.*.{kind}" for kind in ("enqueued", "scheduled", "cancelled")),
            f"{_API}.STREAM.INFO.{ns.stream}",
        ]
        # Results are watched as they are stored.
        return Permissions(role=role, publish=tuple(publish), subscribe=(inbox, ns.record_subject()))
    # What workers and operators both do: enqueue (workers from tasks, operators replaying dead
    # letters), create and read the app's streams, and read its queues (the queue gauges and
    # `status` read each queue's oldest waiting job).
    publish = [
        ns.job_subjects,
        *delayed,
        # Periodic schedules: workers install them, operators also pause and remove them.
        f"jsw.{ns.app}.sched.repeat.*",
        *(f"{_API}.STREAM.{verb}.{s}" for s in streams for verb in ("INFO", "CREATE", "UPDATE")),
        f"{_API}.CONSUMER.LIST.{ns.stream}",
    ]
    if role == "worker":
        publish += [
            ns.dlq_subjects,
            ns.events_subjects,
            # Its own entry in the worker registry, written and removed; any id, since each
            # process makes up its own.
            ns.worker_subject("*"),
            f"{_API}.CONSUMER.CREATE.{ns.stream}.>",
            f"{_API}.CONSUMER.DURABLE.CREATE.{ns.stream}.*",
            f"{_API}.CONSUMER.MSG.NEXT.{ns.stream}.*",
            f"$JS.ACK.{ns.stream}.>",
        ]
        # Cancels of running jobs reach the workers running them.
        return Permissions(role=role, publish=tuple(publish), subscribe=(inbox, ns.cancel_subject()))
    else:
        kept = (ns.dlq_stream, ns.events_stream)
        publish += [
            *(f"{_API}.STREAM.MSG.GET.{s}" for s in kept),
            # Dead letters, events and the worker registry are read through short-lived
            # consumers of their own; an unnamed one is created on the stream's own subject.
            *(
                f"{_API}.CONSUMER.{verb}.{s}{tail}"
                for s in (*kept, ns.workers_stream)
                for verb, tail in (
                    ("CREATE", ""),
                    ("CREATE", ".>"),
                    ("INFO", ".*"),
                    ("DELETE", ".*"),
                    ("MSG.NEXT", ".*"),
                )
            ),
            *(f"$JS.ACK.{s}.>" for s in kept),
            f"{_API}.STREAM.MSG.DELETE.{ns.dlq_stream}",
            f"{_API}.STREAM.PURGE.{ns.dlq_stream}",
        ]
    return Permissions(role=role, publish=tuple(publish), subscribe=(inbox, ns.record_subject()))


def server_config(apps: Sequence[str], roles: Sequence[Role] = ROLES, inbox_prefix: str | None = None) -> str:
    """An ``authorization`` block for a NATS server configuration: for each app, one user per
    role named ``<app>-<role>``, whose password the server reads from the environment variable
    ``<APP>_<ROLE>_PASSWORD`` (so no secret is written in the file)."""
    lines = ["authorization {", "  users = ["]
    for app in apps:
        name = Namespace(app).app
        for role in roles:
            perms = permissions(app, role, inbox_prefix)
            variable = f"{name.upper().replace('-', '_')}_{role.upper()}_PASSWORD"
            lines.append(f'    {{user: "{name}-{role}", password: ${variable},')
            lines.append(f"     permissions: {json.dumps(perms.as_config())}}}")
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"
