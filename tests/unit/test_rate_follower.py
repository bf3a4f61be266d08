"""A worker's queue rate limiters follow the limits set at run time (``RateFollower``): the
queue figures it reads say which rate holds, and the limiter its pull loops read changes."""

from __future__ import annotations

from typing import Any, cast

from jsworker._core.queues import QueueStatus
from jsworker._limits.overrides import RateFollower, queue_rate
from jsworker._limits.rates import RateLimiter
from jsworker._limits.spec import Rate, parse_rate
from jsworker._wire.names import Namespace

CODE = parse_rate("10/s")


def _follower() -> tuple[dict[str, RateLimiter], RateFollower]:
    made: list[str] = []

    def make(queue: str, rate: Rate) -> RateLimiter:
        made.append(queue)
        # Never asked to count here: no connection.
        return RateLimiter(cast(Any, None), Namespace("fol"), f"q-{queue}", rate, lambda: None)

    rates = {"paced": make("paced", CODE)}
    return rates, RateFollower(rates, {"paced": CODE, "free": None}, make)


def _seen(queue: str, **overrides: str) -> list[QueueStatus]:
    return [QueueStatus(queue, overrides=overrides)]


def test_a_rate_set_at_run_time_replaces_the_codes_and_goes_back() -> None:
    rates, follower = _follower()
    limiter = rates["paced"]
    follower.follow(_seen("paced", rate_limit="2/m"))
    assert rates["paced"] is limiter and limiter.rate == parse_rate("2/m")
    follower.follow(_seen("paced", rate_limit="none"))
    assert "paced" not in rates
    follower.follow(_seen("paced"))  # set back: the code's again
    assert rates["paced"].rate == CODE


def test_a_queue_without_a_limit_in_the_code_gets_one_and_others_are_left_alone() -> None:
    rates, follower = _follower()
    follower.follow(_seen("free", rate_limit="5/s"))
    assert rates["free"].rate == parse_rate("5/s")
    follower.follow(_seen("free"))
    assert "free" not in rates
    # A queue this worker does not serve is none of its business.
    follower.follow(_seen("elsewhere", rate_limit="1/s"))
    assert "elsewhere" not in rates


def test_a_stored_rate_jsworker_did_not_write_leaves_the_codes() -> None:
    assert queue_rate(CODE, {"rate_limit": "fast"}) == CODE
    assert queue_rate(CODE, {"max_running": "3"}) == CODE
    assert queue_rate(None, {"rate_limit": "none"}) is None
