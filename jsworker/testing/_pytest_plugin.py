"""pytest fixtures starting real nats-server processes (see :mod:`jsworker.testing`)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from .._server import NatsCluster, NatsServer, ServerNotFoundError, find_nats_server

__all__ = ["nats_cluster", "nats_cluster_module", "nats_server", "nats_server_module"]

_FALSY = {"", "0", "false", "no", "off", "n", "f"}


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in _FALSY


def _require_binary() -> str:
    """The nats-server binary, or skip the test (fail it on CI, where skipping would hide it)."""
    try:
        return find_nats_server()
    except ServerNotFoundError as exc:
        if _in_ci():
            pytest.fail(f"{exc} (failing instead of skipping because CI is set)", pytrace=False)
        pytest.skip(str(exc))


def _serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    binary = _require_binary()
    # The log lands in pytest's temporary directory so it outlives a failed test; the store
    # is a temporary directory of the server itself, removed when it stops.
    log_file = tmp_path_factory.mktemp("nats-server") / "nats-server.log"
    server = NatsServer(binary=binary, log_file=log_file)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A started nats-server with JetStream and a temporary store, stopped after the test."""
    yield from _serve(tmp_path_factory)


@pytest.fixture(scope="module")
def nats_server_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """A started nats-server with JetStream shared by the tests of one module."""
    yield from _serve(tmp_path_factory)


def _cluster() -> Iterator[NatsCluster]:
    binary = _require_binary()
    cluster = NatsCluster(3, binary=binary)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def nats_cluster() -> Iterator[NatsCluster]:
    """A started three-node JetStream cluster on 127.0.0.1, stopped after the test."""
    yield from _cluster()


@pytest.fixture(scope="module")
def nats_cluster_module() -> Iterator[NatsCluster]:
    """A started three-node JetStream cluster shared by the tests of one module (forming one
    costs seconds); tests that kill its nodes want :func:`nats_cluster` instead."""
    yield from _cluster()
