"""Claims on fired jobs: the cluster-wide record that makes a delayed job or a tick run once.

The server may fire one schedule twice (a leader killed between storing the fired message and
removing the schedule), and a cancel can race a firing. Both are settled here, in a stream
with one message per ``(job id, due time)`` subject, written only if the subject is empty:

* the first worker to move a fired job into its queue writes there which fired message it
  moved, with a random part (see :mod:`.relay`), and the job carries the same; a retry of that
  same move finds its own message and moves it again (the queue's dedup keeps one);
* a second fired copy finds another message: a duplicate, dropped without running;
* a cancel that removed the schedule writes ``cancelled``: a copy the server fired just before
  the removal is then dropped; if a worker claimed it first, the cancel came too late;
* the worker that takes a fired job from its queue runs it only if the claim holds what the
  job carries: a producer, who may write jobs but neither claims nor schedules, cannot pass a
  job of its own off as a firing.

Claims expire after :data:`CLAIM_AGE`; a fired job still waiting in its queue after that (every
worker down for a week) is dead-lettered as one no schedule fired, and can be replayed.
"""

from __future__ import annotations

from .._errors import WriteRefused
from .._wire.names import Namespace
from ..jetstream.connection import Connection
from ..jetstream.limits_stream import LimitsStream, StoredMessage
from ..jetstream.stored import SubjectMoved, write
from ..jetstream.topology import StreamSpec

CLAIM_AGE = 7 * 86400.0
CANCELLED = "cancelled"


def claims_spec(namespace: Namespace, replicas: int) -> StreamSpec:
    """The claims stream: one claim a subject, kept :data:`CLAIM_AGE` seconds."""
    return StreamSpec(
        name=namespace.claims_stream,
        subjects=(namespace.claim_subjects,),
        work_queue=False,
        replicas=replicas,
        duplicate_window=60.0,
        max_age=CLAIM_AGE,
        max_msgs_per_subject=1,
    )


#: On every claim a worker or operator writes. The server itself stores its answers (a publish's
#: acknowledgement, an API response) on whatever reply subject a publisher named, a claim's
#: subject included, and such a message carries no header: without this one it is no claim.
CLAIM_MARK = "Jsw-Claim"
_MARKED = {CLAIM_MARK: "1"}


def claim_of(msg: StoredMessage | None) -> str | None:
    """The holder a stored claim names, None when ``msg`` is none or no claim jsworker wrote."""
    if msg is None or CLAIM_MARK not in msg.headers:
        return None
    return (msg.body or b"").decode(errors="replace")


async def claim(conn: Connection, namespace: Namespace, job_id: str, due_ms: int, holder: str) -> str | None:
    """Claim the firing of ``job_id`` due at ``due_ms`` for ``holder``: None when the claim is
    now ``holder``'s (or already was), else who holds it (another holder, or
    :data:`CANCELLED`). A message on the subject that is no claim is written over."""
    subject = namespace.claim_subject(job_id, due_ms)
    expect_last = 0
    for _ in range(5):
        try:
            await write(conn, subject, holder.encode(), _MARKED, expect_last=expect_last)
            return None
        except SubjectMoved:
            found = await LimitsStream(conn, namespace.claims_stream).last(subject)
            held = claim_of(found)
            if held is not None:
                return None if held == holder else held
            # Expired between the write and the read (claim it again), or no claim at all.
            expect_last = found.seq if found is not None else 0
    raise WriteRefused(f"cannot claim {subject}: it keeps changing", 0, transient=True)


async def claim_holder(conn: Connection, namespace: Namespace, job_id: str, due_ms: int) -> str | None:
    """Who holds the claim on the firing of ``job_id`` due at ``due_ms``, None when nobody."""
    return claim_of(
        await LimitsStream(conn, namespace.claims_stream).last(namespace.claim_subject(job_id, due_ms))
    )


def marked(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` with the mark of a claim jsworker wrote (see :data:`CLAIM_MARK`)."""
    return {**headers, **_MARKED}
