"""A local JetStream cluster of nats-server processes on loopback."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from .loopback import HOST, pick_port
from .ownership import OWNED
from .process import POLL, NatsServer, PortInUseError, ServerStartError, remaining


class NatsCluster:
    """Three (n) nats-server processes forming one JetStream cluster on loopback.

    Nodes are named ``n1`` .. ``nN``; each has its own store directory under ``base_dir``
    (a temporary directory removed by :meth:`stop` when not given). After :meth:`start`, each
    node knows the route ports of all the others, so ``cluster.node(i).kill()`` followed by
    ``cluster.node(i).restart()`` brings it back into the cluster.
    """

    _FIRST_PORT_ATTEMPTS = 5

    def __init__(
        self,
        size: int = 3,
        *,
        base_dir: str | os.PathLike[str] | None = None,
        cluster_name: str = "jsw",
        binary: str | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        """``extra_args``: added to every node's command line (``-c FILE`` for settings
        the flags do not cover, such as ``sync_interval``)."""
        if size < 1:
            raise ValueError("a cluster needs at least one node")
        self.size = size
        """Number of nodes."""
        self.cluster_name = cluster_name
        """Name of the cluster (``--cluster_name``)."""
        self._given_base = Path(base_dir) if base_dir is not None else None
        self._temp_base: Path | None = None
        self._binary = binary
        self._extra_args = list(extra_args)
        self.nodes: list[NatsServer] = []
        """The members, ``nodes[0]`` being ``n1``; created by :meth:`start`."""

    @property
    def base_dir(self) -> Path:
        """Directory holding every node's store and log."""
        if self._given_base is not None:
            return self._given_base
        if self._temp_base is None:
            self._temp_base = Path(tempfile.mkdtemp(prefix="jsworker-cluster-"))
            OWNED.add(self)
        return self._temp_base

    @property
    def urls(self) -> list[str]:
        """Client URLs of all nodes."""
        return [node.url for node in self.nodes]

    def node(self, i: int) -> NatsServer:
        """The i-th node, counted from 0 like :attr:`nodes` (``node(0)`` is ``n1``)."""
        return self.nodes[i]

    def _new_node(self, i: int) -> NatsServer:
        name = _node_name(i)
        return NatsServer(
            store_dir=self.base_dir / name,
            name=name,
            cluster_name=self.cluster_name,
            binary=self._binary,
            log_file=self.base_dir / f"{name}.log",
            extra_args=self._extra_args,
        )

    def start(self, timeout: float = 30.0) -> NatsCluster:
        """Start all nodes and wait until each runs JetStream and they agree on a meta leader.

        On failure every node started here is stopped and :class:`ServerStartError` is raised.
        """
        if any(node.running for node in self.nodes):
            raise RuntimeError("the cluster is already running")
        deadline = time.monotonic() + timeout
        self.nodes = [self._new_node(i) for i in range(self.size)]
        try:
            self._start_first(deadline)
            seed = self.nodes[0].cluster_url
            assert seed is not None
            for node in self.nodes[1:]:
                node.configure_cluster(routes=[seed])
                node.start(timeout=remaining(deadline))
            for node in self.nodes:
                # Restarted later, a node must be able to find whichever others are alive.
                others = [o.cluster_url for o in self.nodes if o is not node]
                node.configure_cluster(routes=[url for url in others if url])
            self._wait_meta_leader(deadline, timeout)
        except BaseException:
            self._stop_nodes()
            raise
        return self

    def _start_first(self, deadline: float) -> None:
        # A clustered JetStream server refuses to start without at least one configured route,
        # and the first node has no peer yet: it gets a route to its own cluster port (which
        # the server recognises and ignores). That port must be chosen before the server
        # binds it, so it may be lost to another process in between; then try another one.
        first = self.nodes[0]
        for attempt in range(self._FIRST_PORT_ATTEMPTS):
            port = pick_port()
            first.configure_cluster(cluster_port=port, routes=[f"nats://{HOST}:{port}"])
            try:
                first.start(timeout=remaining(deadline))
                return
            except PortInUseError:
                if attempt == self._FIRST_PORT_ATTEMPTS - 1:
                    raise

    def _wait_meta_leader(self, deadline: float, timeout: float) -> None:
        while True:
            last: list[tuple[Any, Any]] = []
            metas = []
            for node in self.nodes:
                meta = (node.jsz() or {}).get("meta_cluster") or {}
                metas.append(meta)
                last.append((meta.get("leader"), meta.get("cluster_size")))
            leaders = {leader for leader, _ in last}
            agreed = len(leaders) == 1 and None not in leaders and "" not in leaders
            if agreed and all(size == self.size for _, size in last) and self._peers_placeable(metas):
                return
            if time.monotonic() >= deadline:
                peers = [meta.get("replicas") for meta in metas]
                raise ServerStartError(
                    f"JetStream cluster of {self.size} formed no meta leader with every peer online "
                    f"within {timeout:g} s; (leader, cluster_size) per node: {last}; peers as each "
                    f"node sees them: {peers}; log tail of n1:\n{self.nodes[0].log_tail()}"
                )
            time.sleep(POLL * 2)

    def _peers_placeable(self, metas: list[dict[str, Any]]) -> bool:
        """Whether the meta leader counts every other node as a current, online peer. Until
        it has heard a node's own report it lists that node offline, and refuses to place a
        stream's replicas on it ("no suitable peers for placement, peer offline"): an R3
        stream created then fails."""
        leader = metas[0].get("leader")
        for i, meta in enumerate(metas):
            if leader == _node_name(i):
                peers = meta.get("replicas") or []
                return len(peers) == self.size - 1 and all(
                    p.get("current") and not p.get("offline") and p.get("name") for p in peers
                )
        return False

    def _stop_nodes(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.stop()

    def stop(self) -> None:
        """Stop every node (safe to call more than once); removes the temporary base directory."""
        self._stop_nodes()
        if self._temp_base is not None:
            shutil.rmtree(self._temp_base, ignore_errors=True)
            self._temp_base = None
        OWNED.discard(self)

    def __enter__(self) -> NatsCluster:
        if not any(node.running for node in self.nodes):
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _node_name(i: int) -> str:
    """The server name of node ``i`` (0-based), as the cluster's own reports name it."""
    return f"n{i + 1}"
