"""Names of apps, queues and tasks, and the JetStream names derived from them."""

from __future__ import annotations

import pytest

from jsworker import App
from jsworker._errors import ConfigurationError
from jsworker._wire.names import RESERVED_SUFFIXES, Namespace, validate_name

VALID = ["a", "Z", "0", "send_email", "send-email", "A_b-9", "x" * 64]
INVALID = [
    "",
    "a.b",
    "a b",
    " a",
    "*",
    ">",
    "a*",
    "a>",
    "x" * 65,
    "caf\u00e9",
    "a/b",
    "a\tb",
]


@pytest.mark.parametrize("kind", ["app", "queue", "task"])
@pytest.mark.parametrize("name", VALID)
def test_valid_names_are_returned_unchanged(kind: str, name: str) -> None:
    """Letters, digits, '_' and '-' up to 64 characters are accepted as-is."""
    assert validate_name(kind, name) == name


@pytest.mark.parametrize("name", INVALID)
def test_invalid_names_raise_configuration_error(name: str) -> None:
    """Dots, spaces, wildcards, empty, over-long and non-ASCII names are refused."""
    with pytest.raises(ConfigurationError):
        validate_name("task", name)


@pytest.mark.parametrize("value", [None, 5, b"abc", ["a"]])
def test_non_string_names_raise_configuration_error(value: object) -> None:
    """A name that is not a str is a ConfigurationError, not a TypeError from the regex."""
    with pytest.raises(ConfigurationError):
        validate_name("queue", value)  # type: ignore[arg-type]


def test_error_message_names_the_kind_and_value() -> None:
    """The error says which kind of name was bad and what the bad value was."""
    with pytest.raises(ConfigurationError, match=r"invalid queue name 'a\.b'"):
        validate_name("queue", "a.b")


def test_trailing_newline_is_rejected() -> None:
    """A name ending in a newline is refused (it would end up inside a subject)."""
    with pytest.raises(ConfigurationError):
        validate_name("task", "send\n")


def test_namespace_stream_and_subject_names() -> None:
    """Stream names are upper-cased JSW_<APP>[_DLQ]; subjects keep the app name as given."""
    ns = Namespace("shop")
    assert ns.stream == "JSW_SHOP"
    assert ns.dlq_stream == "JSW_SHOP_DLQ"
    assert ns.job_subjects == "jsw.shop.q.>"
    assert ns.dlq_subjects == "jsw.shop.dlq.>"
    assert ns.queue_filter("emails") == "jsw.shop.q.emails.>"
    assert ns.job_subject("emails", "send") == "jsw.shop.q.emails.send"
    assert ns.job_subject("emails", "send", "j1") == "jsw.shop.q.emails.send.j1"
    assert ns.parse_job_subject("jsw.shop.q.emails.send.j1") == ("emails", "send")
    assert ns.parse_job_subject("jsw.shop.q.emails.send.j1.x") is None
    assert ns.dlq_subject("emails", "send") == "jsw.shop.dlq.emails.send"


def test_app_names_differing_only_in_case_are_one_namespace() -> None:
    """App names are case-insensitive: 'shop' and 'SHOP' share stream *and* subjects, never half of it."""
    assert Namespace("shop") == Namespace("SHOP")
    assert Namespace("SHOP").job_subject("q", "t") == "jsw.shop.q.q.t"
    assert Namespace("SHOP").stream == "JSW_SHOP"


def test_parse_job_subject_round_trips_job_subject() -> None:
    """parse_job_subject(job_subject(q, t)) gives back (q, t)."""
    ns = Namespace("shop")
    assert ns.parse_job_subject(ns.job_subject("emails", "send-1")) == ("emails", "send-1")


@pytest.mark.parametrize(
    "subject",
    [
        "jsw.other.q.emails.send",  # another app
        "jsw.shop.dlq.emails.send",  # a dead letter, not a job
        "jsw.shop.q.emails",  # too short
        "jsw.shop.q.emails.send.j1.extra",  # too long
        "jsw.shop.q.emails.send.",  # an empty job id
        "nats.shop.q.emails.send",  # not our prefix
        "jsw.SHOP.q.emails.send",  # app names are case sensitive in subjects
        "",
    ],
)
def test_parse_job_subject_rejects_foreign_subjects(subject: str) -> None:
    """Subjects that are not this app's job subjects parse to None."""
    assert Namespace("shop").parse_job_subject(subject) is None


@pytest.mark.parametrize("name", ["zeta_events", "zeta_EVENTS", "shop_dlq", "Shop_Dlq"])
def test_app_names_that_would_collide_with_another_apps_streams_are_refused(name: str) -> None:
    """App zeta_events's job stream would be app zeta's events stream (JSW_ZETA_EVENTS)."""
    with pytest.raises(ConfigurationError, match="must not end in"):
        App(name)


def test_every_stream_an_app_has_besides_its_jobs_reserves_its_suffix() -> None:
    """An app named like another app's stream (``zeta_leases``) would have that stream as its
    job stream: every suffix the app's streams use is refused in app names."""
    ns = Namespace("zeta")
    names = {
        getattr(ns, attr)
        for attr in dir(Namespace)
        if attr.endswith("_stream") and isinstance(getattr(Namespace, attr), property)
    }
    suffixes = {name.removeprefix("JSW_ZETA").lower() for name in names if name.startswith("JSW_ZETA_")}
    assert suffixes >= {"_leases", "_rates", "_tally", "_sinks"}
    assert suffixes <= set(RESERVED_SUFFIXES)


@pytest.mark.parametrize("name", ["zeta_p1", "zeta_P12", "zeta_p1_p2"])
def test_app_names_that_would_be_another_apps_partition_are_refused(name: str) -> None:
    """App zeta_p1's job stream would be partition 1 of app zeta (JSW_ZETA_P1)."""
    assert Namespace("zeta").partition_stream(1) == "JSW_ZETA_P1"
    with pytest.raises(ConfigurationError, match="would be a partition of app 'zeta"):
        App(name)


@pytest.mark.parametrize(
    "name", ["events", "dlq", "zeta_event", "dlq_shop", "events_x", "zeta_p", "zeta_px1"]
)
def test_names_that_only_look_alike_are_fine(name: str) -> None:
    assert App(name).name == name
