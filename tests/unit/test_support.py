"""tests/support.py's :func:`need`: what a test without its tool does, locally and on CI."""

from __future__ import annotations

import pytest

from ..support import in_ci, need


@pytest.mark.parametrize("value", ["", "0", "false", "False", "no", "off", " n "])
def test_a_false_ci_is_local(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    assert not in_ci()


@pytest.mark.parametrize("value", ["true", "1", "yes", "github"])
def test_any_other_ci_is_ci(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    assert in_ci()


def test_what_is_there_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    need(True, "never said")


def test_what_is_missing_skips_locally(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"^no frobnicator$"):
        need(False, "no frobnicator")


def test_what_is_missing_fails_on_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception) as failed:
        need(False, "no frobnicator")
    assert str(failed.value) == "no frobnicator (failing instead of skipping because CI is set)"
