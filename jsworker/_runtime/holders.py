"""Deliveries of a job that a live worker still holds from before.

The server delivers a message again once its acknowledgement timer runs out, and a leader's
election can run it out for a job a live worker still holds: its heartbeats found no leader
to reach. Jobs that wait in their slots (for a rate limit, a partition's lease) and long runs
hold their deliveries longest, so a few elections in a row can deliver one of them four times
while every delivery is alive in some worker. Counted as runs that ended with no outcome,
those deliveries would make a job that never harmed a worker look like one that kills them
(``max_crashes``), and it would be dead-lettered while its earlier deliveries go on to run.

So a delivery about to be judged poison looks for signs that its earlier deliveries were
alive. The server's: its message is gone, settled by an earlier delivery (one that waited in a
worker's buffer while another ran it). The workers', asked the ``held`` question a status asks
(answered from their memory): one says it settled the job for good, its acknowledgement lost
(the delivery is then acknowledged: the job is done), or one says it holds an earlier
delivery of the message. A delivery that an earlier one holds is left: not run, not
acknowledged, not given back. The
holder's heartbeats and acknowledgement settle the message, as the server keeps one timer per
message whichever delivery reports; if the holder dies, the server delivers the message again
and that delivery is judged afresh. Leaving never removes a job: a wrong answer can only
delay it until the server delivers it again.

Only a delivery already counted as poison looks: nothing here runs on the common path.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Container, Iterable

from .._errors import JsworkerError
from .._observability.logging import get_logger
from .._wire.names import Namespace, place_token
from ..jetstream.connection import Connection
from ..jetstream.delivery import Delivery
from ..jetstream.limits_stream import LimitsStream
from ..jetstream.service import gather
from .execution import JobRun
from .jobbook import SETTLED
from .outcomes import Outcome, OutcomeKind

log = get_logger("jsworker.worker")

# Seconds to wait for a first answer, and then for the others: this worker answers at once
# (it holds this delivery), others across the cluster a round trip later.
_WAIT = 1.0
_LINGER = 0.5


def earliest_held(subject: str, seq: int, deliveries: Iterable[Delivery]) -> int | None:
    """The lowest delivery count among ``deliveries`` of the message at ``seq`` on ``subject``
    (a job's subject is its stream's, whose sequence it is)."""
    return min((d.attempt for d in deliveries if d.stream_seq == seq and d.subject == subject), default=None)


def attempts_said(answers: Iterable[bytes]) -> tuple[list[int], bool]:
    """The delivery counts that workers' answers to a ``held`` question name, and whether one
    says it settled the job for good (its acknowledgement lost)."""
    said, settled = [], False
    for raw in answers:
        with contextlib.suppress(ValueError):
            doc = json.loads(raw)
            if not isinstance(doc, dict):
                continue
            settled = settled or doc.get(SETTLED) is True
            attempt = doc.get("attempt")
            if isinstance(attempt, int) and not isinstance(attempt, bool):
                said.append(attempt)
    return said, settled


class EarlierDeliveries:
    """Tells whether a delivery counted as poison is one that earlier, live deliveries of
    its message make a spare."""

    def __init__(
        self,
        conn: Connection,
        namespace: Namespace,
        holding: Callable[[], Iterable[Delivery]],
        finished: Container[tuple[int, int]],
    ):
        self._conn = conn
        self._namespace = namespace
        #: The deliveries this worker holds, and the places of the jobs it settled for good.
        self._holding = holding
        self._finished = finished

    async def left(self, job: JobRun) -> Outcome | None:
        """The outcome that leaves ``job``'s delivery to an earlier one of its message (it
        is settled, or a live worker holds it), or None when neither is known."""
        seq, attempt = job.delivery.stream_seq, job.delivery.attempt
        if job.place in self._finished:
            # Its acknowledgement may not have reached the server yet: known here first.
            return _left(attempt, "this worker settled its message")
        try:
            stream = self._namespace.partition_stream(job.stream_partition)
            if await LimitsStream(self._conn, stream).get(seq) is None:
                return _left(attempt, "its message was settled by an earlier delivery")
        except JsworkerError as exc:
            log.warning("job.message_unread", error=str(exc), **job.log_fields())
        earlier = earliest_held(
            job.delivery.subject, seq, (d for d in self._holding() if d.attempt < attempt)
        )
        if earlier is None:
            subject, place = self._namespace.held_subject(job.job_id), place_token(seq, job.stream_partition)
            answers = await gather(self._conn, subject, place.encode(), wait=_WAIT, linger=_LINGER)
            attempts, settled = attempts_said(answers)
            if settled:
                # Run to its end by a live worker whose acknowledgement the server lost (a
                # leader's election): done, so acknowledged now, never run again. Said: this
                # delivery is acknowledged unrun.
                reason = f"delivery {attempt} not run: a live worker settled it"
                log.info("job.skipped", reason=reason, **job.log_fields())
                return Outcome(OutcomeKind.SKIPPED, reason)
            # Only an earlier delivery: of two workers holding one message, the one with the
            # later delivery steps aside, never both.
            earlier = min((a for a in attempts if a < attempt), default=None)
        if earlier is None:
            return None
        return _left(attempt, f"a live worker holds delivery {earlier} of its message")


def _left(attempt: int, why: str) -> Outcome:
    return Outcome(OutcomeKind.LEFT, f"delivery {attempt} not run: {why}")
