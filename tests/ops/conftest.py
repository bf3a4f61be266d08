"""Fixtures of tests/ops: the dev certificates of deploy/tls/make-dev-certs.sh, made once."""

from __future__ import annotations

from pathlib import Path

import pytest

from .opsfiles import run_make_dev_certs


@pytest.fixture(scope="session")
def dev_certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with what make-dev-certs.sh writes (ca.pem, ca.key, server.pem, server.key),
    made by the script itself in a temporary directory, never in the repository."""
    out = tmp_path_factory.mktemp("dev-certs") / "tls"
    run_make_dev_certs(out)
    return out
