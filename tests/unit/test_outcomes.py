"""Settlement: the pure mapping from a job's outcome to what the server is told."""

from __future__ import annotations

import pytest

from jsworker._runtime.outcomes import (
    ACK,
    Outcome,
    OutcomeKind,
    RetryPolicy,
    Verb,
    backoff_delay,
    crashed_too_often,
    decide,
)

POLICY = RetryPolicy(max_retries=3, backoff=1.0, backoff_max=600.0)


def _zero() -> float:
    return 0.0


def _one() -> float:
    return 1.0


def test_succeeded_is_acked() -> None:
    """A job that returned is acked, with no delay and no reason."""
    d = decide(Outcome(OutcomeKind.SUCCEEDED), 1, POLICY)
    assert (d.verb, d.delay, d.reason) == (Verb.ACK, None, "")


def test_succeeded_on_last_attempt_is_still_acked() -> None:
    """Success is acked whatever the attempt number."""
    assert decide(Outcome(OutcomeKind.SUCCEEDED), 4, POLICY).verb is Verb.ACK


@pytest.mark.parametrize("attempt", [1, 4, 99])
def test_cancelled_is_nakked_at_once(attempt: int) -> None:
    """A job cut short by shutdown goes back immediately, even past its attempts."""
    d = decide(Outcome(OutcomeKind.CANCELLED, "shutdown"), attempt, POLICY)
    assert d.verb is Verb.NAK
    assert d.delay is None


@pytest.mark.parametrize("kind", [OutcomeKind.REJECTED, OutcomeKind.BAD_INPUT, OutcomeKind.POISON])
def test_final_outcomes_dead_letter_on_first_attempt(kind: OutcomeKind) -> None:
    """Reject, bad input and poison dead-letter at once, keeping the outcome's reason."""
    d = decide(Outcome(kind, "the reason"), 1, POLICY)
    assert d.verb is Verb.DEAD_LETTER
    assert d.reason == "the reason"


@pytest.mark.parametrize("kind", [OutcomeKind.REJECTED, OutcomeKind.BAD_INPUT, OutcomeKind.POISON])
def test_final_outcome_without_reason_uses_kind_name(kind: OutcomeKind) -> None:
    """A dead letter always has a reason: the outcome kind when none was given."""
    assert decide(Outcome(kind), 1, POLICY).reason == kind.value


@pytest.mark.parametrize("kind", [OutcomeKind.FAILED, OutcomeKind.RETRY, OutcomeKind.TIMED_OUT])
@pytest.mark.parametrize("attempt", [1, 2, 3])
def test_retryable_outcomes_with_attempts_left_are_nakked_with_backoff(
    kind: OutcomeKind, attempt: int
) -> None:
    """Failures, Retry and timeouts with attempts left are nakked with the jittered backoff."""
    d = decide(Outcome(kind, "oops"), attempt, POLICY, rand=_one)
    assert d.verb is Verb.NAK
    assert d.delay == backoff_delay(attempt, 1.0, 600.0, _one) == 2.0 ** (attempt - 1)


@pytest.mark.parametrize("kind", [OutcomeKind.FAILED, OutcomeKind.RETRY, OutcomeKind.TIMED_OUT])
def test_retryable_outcome_with_no_attempts_left_dead_letters(kind: OutcomeKind) -> None:
    """On attempt max_retries+1 a retryable outcome dead-letters, saying attempts ran out."""
    d = decide(Outcome(kind, "boom"), 4, POLICY)
    assert d.verb is Verb.DEAD_LETTER
    assert d.delay is None
    assert "boom" in d.reason
    assert "attempts exhausted" in d.reason
    assert "4 of 4" in d.reason


def test_exhausted_without_reason_names_the_kind() -> None:
    """An exhausted retry without a reason is described by its kind."""
    d = decide(Outcome(OutcomeKind.TIMED_OUT), 2, RetryPolicy(1, 1.0, 10.0))
    assert d.reason.startswith("timed_out ")
    assert "2 of 2" in d.reason


def test_zero_max_retries_dead_letters_first_failure() -> None:
    """With max_retries=0 the first failure is final."""
    d = decide(Outcome(OutcomeKind.FAILED, "x"), 1, RetryPolicy(0, 1.0, 10.0))
    assert d.verb is Verb.DEAD_LETTER


@pytest.mark.parametrize("delay", [2.0, 0.0, 1234.5])
def test_retry_delay_overrides_backoff(delay: float) -> None:
    """A Retry(delay=...) delay is used as given (0 included) instead of the backoff."""
    out = Outcome(OutcomeKind.RETRY, "later", retry_delay=delay)
    d = decide(out, 2, POLICY, rand=_one)
    assert d.verb is Verb.NAK
    assert d.delay == delay


def test_retry_delay_does_not_extend_attempts() -> None:
    """A Retry with a delay still dead-letters when no attempts are left."""
    out = Outcome(OutcomeKind.RETRY, "later", retry_delay=2.0)
    assert decide(out, 4, POLICY).verb is Verb.DEAD_LETTER


@pytest.mark.parametrize(
    ("attempt", "base", "cap", "ceiling"),
    [
        (1, 1.0, 600.0, 1.0),
        (2, 1.0, 600.0, 2.0),
        (4, 1.0, 600.0, 8.0),
        (3, 0.5, 600.0, 2.0),
        (10, 1.0, 60.0, 60.0),  # capped: 512 > 60
        (7, 2.0, 100.0, 100.0),  # 128 > 100
        (0, 3.0, 600.0, 3.0),  # attempt 0 treated like attempt 1
    ],
)
def test_backoff_delay_bounds(attempt: int, base: float, cap: float, ceiling: float) -> None:
    """The delay spans [ceiling/2, ceiling] with ceiling = min(cap, base * 2**(attempt-1))."""
    assert backoff_delay(attempt, base, cap, _zero) == pytest.approx(ceiling / 2)
    assert backoff_delay(attempt, base, cap, _one) == pytest.approx(ceiling)
    mid = backoff_delay(attempt, base, cap, lambda: 0.5)
    assert ceiling / 2 < mid < ceiling


def test_backoff_delay_default_rand_stays_in_bounds() -> None:
    """With the real random source the delay never leaves [ceiling/2, ceiling]."""
    for _ in range(200):
        assert 4.0 <= backoff_delay(4, 1.0, 600.0) <= 8.0


def test_backoff_zero_base_means_immediate_retry() -> None:
    """retry_backoff=0 gives a zero delay."""
    assert backoff_delay(5, 0.0, 600.0, _one) == 0.0


def test_backoff_delay_is_capped_for_huge_attempts() -> None:
    """Even after very many attempts the delay is bounded by the cap rather than overflowing."""
    assert backoff_delay(1100, 1.0, 600.0, _one) == 600.0


@pytest.mark.parametrize(
    ("attempt", "handed_back", "failures", "max_crashes", "expected"),
    [
        (1, 0, 0, 0, False),  # a first delivery never crashed
        (2, 0, 0, 0, True),  # one run ended with no outcome, none allowed
        (3, 0, 0, 2, False),  # two crashes, two allowed
        (4, 0, 0, 2, True),
        (4, 0, 3, 0, False),  # three earlier runs, all the task's own failures
        (5, 1, 1, 2, False),  # one given back, one failure, two crashes
        (6, 1, 1, 2, True),
        (100, 0, 0, 2, True),
    ],
)
def test_crashes_are_runs_that_ended_with_no_outcome(
    attempt: int, handed_back: int, failures: int, max_crashes: int, expected: bool
) -> None:
    """Only earlier runs that neither failed on their own nor were given back count."""
    assert crashed_too_often(attempt, handed_back, failures, max_crashes) is expected


def test_non_retryable_failure_is_dead_lettered_at_once() -> None:
    """A failure the task does not retry goes to the dead letters even with attempts left."""
    outcome = Outcome(OutcomeKind.FAILED, "KeyError: 'x'", retryable=False)
    decision = decide(outcome, 1, RetryPolicy(5, 1.0, 60.0))
    assert decision.verb is Verb.DEAD_LETTER
    assert "not retryable" in decision.reason


@pytest.mark.parametrize("attempt", [1, 4, 9])
def test_the_success_shortcut_is_what_decide_says(attempt: int) -> None:
    """The worker acks a success without calling decide(); the two must agree."""
    assert decide(Outcome(OutcomeKind.SUCCEEDED), attempt, POLICY) is ACK
