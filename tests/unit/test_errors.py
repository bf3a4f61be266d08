"""The exception hierarchy and the task control signals."""

from __future__ import annotations

import inspect

import pytest

import jsworker
import jsworker._errors as errors_module
from jsworker._cli.loader import AppNotFound
from jsworker._errors import JsworkerError, Reject, Retry, TaskControl


@pytest.mark.parametrize("delay", [-1, -0.001])
def test_retry_rejects_negative_delay(delay: float) -> None:
    """Retry(delay<0) is a programming error and raises ValueError."""
    with pytest.raises(ValueError, match="between 0 and"):
        Retry(delay=delay)


def test_retry_keeps_delay_and_reason() -> None:
    """Retry stores its delay (0 allowed) and reason; the default delay is None."""
    assert Retry().delay is None
    assert Retry().reason == "retry requested"
    r = Retry(delay=0, reason="rate limited")
    assert r.delay == 0
    assert r.reason == "rate limited"
    assert str(r) == "rate limited"


def test_reject_keeps_reason() -> None:
    """Reject stores its reason, default 'rejected'."""
    assert Reject().reason == "rejected"
    assert Reject("bad input").reason == "bad input"


@pytest.mark.parametrize("signal", [Retry, Reject])
def test_control_signals_are_not_jsworker_errors(signal: type[Exception]) -> None:
    """Retry and Reject are signals: an `except JsworkerError` must not swallow them."""
    assert issubclass(signal, TaskControl)
    assert not issubclass(signal, JsworkerError)
    with pytest.raises(signal):
        try:
            raise signal()
        except JsworkerError:  # pragma: no cover - must not happen
            pytest.fail("caught as a JsworkerError")


def _error_classes() -> list[type[BaseException]]:
    found = [
        obj
        for _, obj in inspect.getmembers(errors_module, inspect.isclass)
        if issubclass(obj, BaseException) and not issubclass(obj, TaskControl)
    ]
    return [*found, AppNotFound]


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda c: c.__name__)
def test_every_error_class_is_a_jsworker_error(cls: type[BaseException]) -> None:
    """Every error jsworker defines derives from JsworkerError."""
    assert issubclass(cls, JsworkerError)


def test_public_errors_are_exported() -> None:
    """The error classes a user catches are importable from the package root."""
    for name in ["ConfigurationError", "ConnectError", "EnqueueError", "SerializationError", "TopologyError"]:
        assert issubclass(getattr(jsworker, name), JsworkerError)
