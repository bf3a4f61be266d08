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


#: The server configuration the fixtures' servers are given: a file store whose size does not
#: depend on the free disk (see :func:`_store_args`).
STORE_CONFIG = "jetstream { max_file_store: 1TB }\n"


def _store_args(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Arguments giving a test server a file store that does not depend on the free disk.

    A stream with a byte limit (an app's dead letters and events: 1 GiB each by default)
    reserves that limit against the server's file store, which the server otherwise sizes at
    75% of the disk's free space: whether the streams of a module's apps fit would depend on
    the machine. The reservation is bookkeeping; the tests write little.
    """
    config = tmp_path_factory.mktemp("nats-config") / "store.conf"
    config.write_text(STORE_CONFIG)
    return ["-c", str(config)]


def _serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    binary = _require_binary()
    # The log lands in pytest's temporary directory so it outlives a failed test; the store
    # is a temporary directory of the server itself, removed when it stops.
    log_file = tmp_path_factory.mktemp("nats-server") / "nats-server.log"
    server = NatsServer(binary=binary, log_file=log_file, extra_args=_store_args(tmp_path_factory))
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


def _cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    binary = _require_binary()
    cluster = NatsCluster(3, binary=binary, extra_args=_store_args(tmp_path_factory))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def nats_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    """A started three-node JetStream cluster on 127.0.0.1, stopped after the test."""
    yield from _cluster(tmp_path_factory)


@pytest.fixture(scope="module")
def nats_cluster_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    """A started three-node JetStream cluster shared by the tests of one module (forming one
    costs seconds); tests that kill its nodes want :func:`nats_cluster` instead."""
    yield from _cluster(tmp_path_factory)
