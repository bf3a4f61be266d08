"""Publishing jobs with server-side dedup, one at a time or many in flight.

Every message carries ``Nats-Msg-Id``. A publish whose acknowledgement does not arrive is
retried with the very same id, so the server's dedup window turns a retry of a publish that
did get stored into a no-op instead of a second job.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import nats.errors

from .._errors import EnqueueError
from .._errors import SubjectTaken as SubjectTaken
from .._wire.headers import EXPECTED_LAST_SUBJECT_SEQ, EXPECTED_LAST_SUBJECT_SEQ_SUBJECT, JOB_ID, MSG_ID
from .api import IN_PROCESS, REQUEST_ERRORS, UNAVAILABLE, classify, parse_reply
from .connection import Connection
from .message import (
    NoStreamError,
    OutMessage,
    PayloadTooLargeError,
    Stored,
    check_size,
    headers_of,
    stored_from,
)
from .pipeline import AckPipeline, RefusedError, StalledError
from .stored import WRONG_LAST_SEQUENCE

_SCHEDULES_DISABLED = 10188
# The first attempt's wait for an acknowledgement, doubling each attempt up to ``timeout``. An
# acknowledgement takes milliseconds; one not back within a second was most likely lost with a
# stream leader that went away, and asking again (the same Nats-Msg-Id: the server stores it
# once) reaches the new leader as soon as it is elected, instead of after the whole timeout.
_FIRST_WAIT = 1.0
# The longest pause between attempts: while a stream elects its leader each attempt is answered
# at once ("no responders"), and the first one after the election is stored.
_MOST_PAUSE = 0.25

__all__ = [
    "NoStreamError",
    "OutMessage",
    "PayloadTooLargeError",
    "Publisher",
    "Stored",
    "SubjectTaken",
    "check_size",
]


class Publisher:
    """Stores messages in JetStream over one connection.

    A lost acknowledgement, a dropped connection or (with ``retry_no_stream``) a stream without
    a leader is retried with the same ``Nats-Msg-Id`` for up to ``retry_for`` seconds; then
    :class:`EnqueueError` is raised. The first attempt waits a second for its acknowledgement,
    each later one twice as long, up to ``timeout``. That rides out a server restart or a
    cluster leader election without ever storing a job twice, and without waiting out a whole
    ``timeout`` for an acknowledgement the old leader took with it.
    """

    def __init__(
        self,
        conn: Connection,
        *,
        timeout: float = 5.0,
        retry_for: float = 15.0,
        window: int = 1000,
        retry_no_stream: bool = False,
    ) -> None:
        self.conn = conn
        self.timeout = timeout
        self.retry_for = retry_for
        self.window = window
        self.retry_no_stream = retry_no_stream

    async def publish(self, msg: OutMessage, *, maybe_stored: bool = False) -> Stored:
        """Store one message and wait for the server's acknowledgement.

        A try that got no answer may have stored the message: when a later try of this call
        (``maybe_stored``: or an earlier publish of the same message) is then answered
        "duplicate", the server holds the message once, and this call stored it. It reads as
        stored, not as a duplicate of somebody else's.
        """
        check_size(msg, self.conn.max_payload)
        deadline = time.monotonic() + self.retry_for
        last: BaseException | None = None
        attempts = 0
        while True:
            remaining = deadline - time.monotonic()
            if attempts and remaining <= 0:
                break
            attempts += 1
            if maybe_stored and MSG_ID in msg.headers and EXPECTED_LAST_SUBJECT_SEQ in msg.headers:
                # The server checks a subject's expectation before the dedup key: this try would
                # be refused by its own first, stored one. The dedup key alone decides now.
                msg = _without_expectations(msg)
            try:
                wait = min(self.timeout, _FIRST_WAIT * 2 ** (attempts - 1), remaining)
                answer = await self.conn.nc.request(
                    msg.subject, msg.body, timeout=max(0.001, wait), headers=headers_of(msg)
                )
                stored = stored_from(parse_reply(answer.data, answer.headers))
                return Stored(stored.seq, False) if maybe_stored and stored.duplicate else stored
            except REQUEST_ERRORS as exc:
                _raise_final(exc, msg, self.conn.max_payload, self.retry_no_stream)
                last = exc  # retried with the same Nats-Msg-Id: the server drops a second copy
                # No answer at all (rather than the server's "no stream leader yet"): stored or not.
                maybe_stored = maybe_stored or not classify(exc).code
            await asyncio.sleep(min(0.05 * 2**attempts, _MOST_PAUSE, max(0.0, deadline - time.monotonic())))
        job = msg.headers.get(MSG_ID) or msg.headers.get(JOB_ID)
        servers = ", ".join(self.conn.options.servers)
        raise EnqueueError(
            f"job {job} not acknowledged by {servers} after {attempts} attempts in {self.retry_for:g}s "
            f"({type(last).__name__}): it may be stored already, or be stored later (with the "
            "connection down, its message waits in this process's send buffer until the server is "
            "back); enqueue it again only with the same job id (job_id=err.job_id), which cannot "
            "make a second job",
            job_id=job,
        ) from last

    async def publish_many(self, msgs: Sequence[OutMessage]) -> list[Stored]:
        """Store many messages with up to ``window`` acknowledgements outstanding.

        Results come back in the order of ``msgs``. Messages whose acknowledgement went missing
        are published once more one by one (same ids), so the call either stores all of them
        or raises.
        """
        for msg in msgs:
            check_size(msg, self.conn.max_payload)
        results: list[Stored | None] = [None] * len(msgs)
        pipe = AckPipeline(self.conn, window=self.window, timeout=self.timeout)
        try:
            async with pipe:
                await pipe.publish_all(msgs)  # all checked above, before any was sent
                await pipe.wait()
        except (StalledError, nats.errors.Error, OSError):
            pass  # whatever has no acknowledgement is published again below, one by one
        # Answered without being stored: a "duplicate" when asked again is another write's.
        unstored: set[int] = set()
        for number, answer in pipe.results.items():
            if isinstance(answer, RefusedError):
                if answer.err_code == IN_PROCESS:
                    # Another write of this id was being stored: asked again below, the answer
                    # then says "duplicate" (its, not this one's) or stores this one.
                    unstored.add(number)
                    continue
                if not answer.no_stream:
                    raise answer
                if not self.retry_no_stream:
                    raise NoStreamError(str(answer))
                unstored.add(number)  # the stream exists: its leader is being elected; retried below
                continue
            results[number] = answer
        for i, result in enumerate(results):
            if result is None:
                # Sent once already and not refused, its answer lost: a "duplicate" now is that send.
                results[i] = await self.publish(msgs[i], maybe_stored=i not in unstored)
        return [r for r in results if r is not None]


def _without_expectations(msg: OutMessage) -> OutMessage:
    headers = {
        k: v
        for k, v in msg.headers.items()
        if k not in (EXPECTED_LAST_SUBJECT_SEQ, EXPECTED_LAST_SUBJECT_SEQ_SUBJECT)
    }
    return OutMessage(msg.subject, msg.body, headers)


def _raise_final(exc: BaseException, msg: OutMessage, max_payload: int, retry_no_stream: bool) -> None:
    """Raise the jsworker error for failures a retry cannot fix; return for those it can."""
    job = msg.headers.get(MSG_ID) or msg.headers.get(JOB_ID)
    failure = classify(exc)
    if failure.err_code in WRONG_LAST_SEQUENCE and EXPECTED_LAST_SUBJECT_SEQ in msg.headers:
        raise SubjectTaken(f"job {job}: {msg.subject} already holds a job") from exc
    if failure.code == UNAVAILABLE:
        if retry_no_stream:
            return  # the stream exists: its leader is being elected, or the server is restarting
        raise NoStreamError(f"no stream accepts subject {msg.subject}") from exc
    if failure.err_code == IN_PROCESS:
        return  # another write of this id is being stored: asked again, the answer says whose
    if failure.err_code == _SCHEDULES_DISABLED:
        # A job stream made before schedules were allowed (older jsworker or server): the
        # caller brings it up to date, as for a missing stream, and tries again.
        raise NoStreamError(f"the stream holding {msg.subject} does not allow schedules yet") from exc
    if failure.code:
        raise EnqueueError(f"server rejected job {job}: {failure.text}") from exc
    if isinstance(exc, nats.errors.MaxPayloadError):
        raise EnqueueError(
            f"job {job} is {len(msg.body)} bytes, over the server's max_payload of {max_payload} bytes"
        ) from exc
