"""What happened to a job (:class:`Outcome`), what the server is told of it (:class:`Decision`,
from :func:`decide`, a pure function: the table below) and both with the delivery's time in
the worker (:class:`Settlement`, what the stages after a run see).

| outcome                                         | verb                                  |
|-------------------------------------------------|---------------------------------------|
| returned                                        | ack                                   |
| Retry / exception / timeout, attempts left      | nak with backoff (or Retry's delay)   |
| an exception the task does not retry            | dead-letter                           |
| the same with no attempts left                  | dead-letter (stored, then term)       |
| Reject, unknown task, bad payload or arguments  | dead-letter                           |
| ended with no outcome more than max_crashes     | dead-letter (a job that kills workers)|
| cancelled by shutdown                           | nak at once, for another worker       |
| skipped (a fired job's duplicate, or cancelled) | ack: it must never run                |
| aborted (cancelled on request) or expired       | ack: it must never run again          |
| snoozed (the task raised Snooze)                | nak with its delay: no attempt spent  |
| left (a live worker holds an earlier delivery)  | nothing: the holder settles it        |
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable
from dataclasses import dataclass


class OutcomeKind(enum.Enum):
    """What happened when a job was run (or why it was not)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the task raised
    RETRY = "retry"  # the task raised Retry
    TIMED_OUT = "timed_out"
    REJECTED = "rejected"  # the task raised Reject
    BAD_INPUT = "bad_input"  # unknown task, undecodable body, arguments that do not fit
    POISON = "poison"  # its runs ended with no outcome more than max_crashes times: it kills its workers
    CANCELLED = "cancelled"  # the worker shut down before the job finished
    SKIPPED = "skipped"  # a fired job that must not run: a second copy of one firing, or cancelled
    ABORTED = "aborted"  # cancelled on request (app.cancel) before or while it ran
    EXPIRED = "expired"  # not started within its expiry
    SNOOZED = "snoozed"  # the task raised Snooze: again later, neither a failure nor a crash
    LEFT = "left"  # a live worker holds an earlier delivery of its message: that one settles it


# Not frozen: a task's return value makes an Outcome per job, and a frozen dataclass's
# __init__ (object.__setattr__ per field) costs more (bench/README.md, "Hot-path choices").
# Nothing changes one once made.
@dataclass(slots=True)
class Outcome:
    """An outcome with what is known about it."""

    kind: OutcomeKind
    reason: str = ""
    error: BaseException | None = None
    retry_delay: float | None = None
    retryable: bool = True  # False for exceptions the task lists in dont_retry_on (or not in retry_on)
    value: object = None  # what the task returned (kept for its result)
    #: A limit gave the job back (a ``snoozed`` outcome its task did not ask for).
    held: bool = False


class Verb(enum.Enum):
    """What the worker does with the message."""

    ACK = "ack"
    NAK = "nak"
    DEAD_LETTER = "dead_letter"
    LEAVE = "leave"  # nothing is sent: another delivery of the message settles it


@dataclass(frozen=True, slots=True)
class Decision:
    """The verb, the redelivery delay for a nak, and the reason for a dead letter."""

    verb: Verb
    delay: float | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Attempts and backoff for one task."""

    max_retries: int
    backoff: float
    backoff_max: float


# Not frozen, as Outcome: one is made per job (bench/README.md, "Hot-path choices").
@dataclass(slots=True)
class Settlement:
    """How one delivery ended: its outcome, what the server was told, and the seconds the
    worker held it (from its take-up to the server being told; 0.0 before that). Nothing
    changes one once made."""

    outcome: Outcome
    decision: Decision
    duration: float = 0.0


#: The decision for every job that succeeded.
ACK = Decision(Verb.ACK)
#: The decision for a delivery left to the live worker that holds an earlier one.
LEAVE = Decision(Verb.LEAVE)
_NAK_NOW = Decision(Verb.NAK)
_RETRYABLE = (OutcomeKind.FAILED, OutcomeKind.RETRY, OutcomeKind.TIMED_OUT)
#: The reason of an ``aborted`` job that a cancel stopped while it ran (it counts as started).
STOPPED_WHILE_RUNNING = "cancelled while it ran"
_NEVER_AGAIN = (OutcomeKind.SKIPPED, OutcomeKind.ABORTED, OutcomeKind.EXPIRED)
_FINAL = (OutcomeKind.REJECTED, OutcomeKind.BAD_INPUT, OutcomeKind.POISON)
#: Outcomes of jobs dead-lettered by their checks, before any run.
NOT_STARTED = (OutcomeKind.BAD_INPUT, OutcomeKind.POISON)


def backoff_delay(attempt: int, base: float, cap: float, rand: Callable[[], float] = random.random) -> float:
    """Exponential backoff with jitter for the retry after ``attempt`` (1-based).

    The un-jittered delay doubles each attempt from ``base`` up to ``cap``; the result lies
    between half of it and all of it, so a burst of failures does not come back in lockstep.
    """
    # The exponent is bounded so that huge attempt numbers reach the cap instead of overflowing.
    ceiling = min(cap, base * 2.0 ** min(max(0, attempt - 1), 64))
    return ceiling / 2 + rand() * ceiling / 2


def crashed_too_often(attempt: int, handed_back: int, failures: int, max_crashes: int) -> bool:
    """True when the runs before delivery number ``attempt`` that ended with no outcome (not
    given back by a stopping worker, not one of the task's ``failures`` or snoozes, which
    ``failures`` includes here) are more than ``max_crashes``: the job likely kills its
    worker (checked before running)."""
    return attempt - 1 - handed_back - failures > max_crashes


def is_failure(outcome: Outcome) -> bool:
    """True for an outcome ``max_retries`` counts: the task raised, asked to retry or timed out."""
    return outcome.kind in _RETRYABLE


def decide(
    outcome: Outcome, attempt: int, policy: RetryPolicy, rand: Callable[[], float] = random.random
) -> Decision:
    """Decide the verb for ``outcome`` under ``policy``; ``attempt`` counts the task's own
    failures, this one included (1 for a first failure), not the runs that crashed."""
    kind = outcome.kind
    if kind is OutcomeKind.SUCCEEDED or kind in _NEVER_AGAIN:
        return ACK
    if kind is OutcomeKind.CANCELLED:
        return _NAK_NOW
    if kind is OutcomeKind.LEFT:
        return LEAVE
    if kind is OutcomeKind.SNOOZED:
        return Decision(Verb.NAK, delay=outcome.retry_delay or 0.0)
    if kind in _FINAL:
        return Decision(Verb.DEAD_LETTER, reason=outcome.reason or kind.value)
    if not outcome.retryable:
        return Decision(Verb.DEAD_LETTER, reason=f"not retryable: {outcome.reason or kind.value}")
    if kind in _RETRYABLE:
        if attempt <= policy.max_retries:
            delay = outcome.retry_delay
            if delay is None:
                delay = backoff_delay(attempt, policy.backoff, policy.backoff_max, rand)
            return Decision(Verb.NAK, delay=delay)
        return Decision(
            Verb.DEAD_LETTER,
            reason=f"{outcome.reason or kind.value} "
            f"(attempts exhausted: {attempt} of {policy.max_retries + 1})",
        )
    raise ValueError(f"unknown outcome {kind}")  # pragma: no cover - enum is closed
