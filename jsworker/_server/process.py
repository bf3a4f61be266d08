"""One local nats-server process with JetStream, owned by the object that started it."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from .._errors import PortInUseError as PortInUseError
from .._errors import ServerStartError as ServerStartError
from .binary import NOT_FOUND_HELP, ServerNotFoundError, find_nats_server
from .loopback import HOST, HTTP_TIMEOUT, http_get, pick_port, port_is_free, port_of
from .ownership import OWNED

POLL = 0.05
_PORT_ATTEMPTS = 5
_LOG_TAIL_LINES = 25
# How a failed bind reads in the server log (POSIX, then Windows).
_PORT_IN_USE_MARKERS = ("address already in use", "only one usage of each socket address")


def _failed_bind_line(log: str) -> str | None:
    """The log line saying a port could not be bound because it is taken, if any."""
    for line in log.splitlines():
        if any(marker in line.lower() for marker in _PORT_IN_USE_MARKERS):
            return line
    return None


def remaining(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


class NatsServer:
    """One nats-server process with JetStream, loopback only, owned by this object.

    ``port=None`` lets the server pick a free client port; the real one is read back once it
    runs. A monitoring port is always opened (picked by the server) for readiness checks.
    ``store_dir=None`` uses a temporary directory that :meth:`stop` removes; a given
    ``store_dir`` is kept, so a later server can reuse it. The server log goes to
    ``log_file`` (by default a file in a private temporary directory), never to the terminal,
    and its tail is part of every :class:`ServerStartError`.

    Setting ``cluster_name``, ``cluster_port`` or ``routes`` makes the server a cluster
    member (``cluster_port=None`` then lets it pick the route port). A clustered JetStream
    server also needs ``name``.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        store_dir: str | os.PathLike[str] | None = None,
        name: str | None = None,
        cluster_name: str | None = None,
        cluster_port: int | None = None,
        routes: Sequence[str] = (),
        extra_args: Sequence[str] = (),
        binary: str | None = None,
        log_file: str | os.PathLike[str] | None = None,
    ) -> None:
        for what, value in (("port", port), ("cluster_port", cluster_port)):
            # 0 would not mean "any port" to nats-server but its default port; None does that.
            if value is not None and not 0 < value < 65536:
                raise ValueError(f"{what} must be in 1..65535 or None (server picks), not {value}")
        self._requested_port = port
        self._requested_cluster_port = cluster_port
        self._name = name
        self._cluster_name = cluster_name
        self._routes = list(routes)
        self._extra_args = list(extra_args)
        self._binary = binary
        self._given_store = Path(store_dir) if store_dir is not None else None
        self._given_log = Path(log_file) if log_file is not None else None
        self._workdir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0
        self._port: int | None = None
        self._cluster_port: int | None = None
        self._monitoring_url: str | None = None

    # -- properties --------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Client URL, ``nats://127.0.0.1:PORT``."""
        return f"nats://{HOST}:{self.port}"

    @property
    def port(self) -> int:
        """Client port (known once the server has started)."""
        if self._port is None:
            if self._requested_port is None:
                raise RuntimeError("the server has not been started, so its port is not known yet")
            return self._requested_port
        return self._port

    @property
    def cluster_url(self) -> str | None:
        """Route URL other cluster members connect to, or None when not clustered (or not known yet)."""
        port = self._cluster_port if self._cluster_port is not None else self._requested_cluster_port
        if port is None or not self._clustered:
            return None
        return f"nats://{HOST}:{port}"

    @property
    def monitoring_url(self) -> str:
        """Base URL of the HTTP monitoring endpoint (``/healthz``, ``/jsz``, ...) of the current run."""
        if self._monitoring_url is None:
            raise RuntimeError("the server has not been started, so its monitoring port is not known")
        return self._monitoring_url

    @property
    def pid(self) -> int | None:
        """Process id while the process is alive, else None."""
        return self._proc.pid if self.running and self._proc is not None else None

    @property
    def store_dir(self) -> Path:
        """JetStream store directory (a temporary one is created on first use if none was given)."""
        if self._given_store is not None:
            return self._given_store
        return self._ensure_workdir() / "store"

    @property
    def log_file(self) -> Path:
        """File the server's output goes to."""
        if self._given_log is not None:
            return self._given_log
        return self._ensure_workdir() / "nats-server.log"

    @property
    def running(self) -> bool:
        """Whether the process started by this object is still alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def _clustered(self) -> bool:
        return bool(self._cluster_name or self._requested_cluster_port is not None or self._routes)

    # -- life cycle ----------------------------------------------------------------------------

    def start(self, timeout: float = 20.0) -> NatsServer:
        """Start the server and wait until JetStream is ready; returns ``self``.

        Raises :class:`PortInUseError` when the fixed port is taken, :class:`ServerNotFoundError`
        when there is no binary, and :class:`ServerStartError` (with the log tail) when the
        process exits or is not ready within ``timeout`` seconds; the process is then killed.
        """
        if self.running:
            raise RuntimeError(f"nats-server is already running (pid {self.pid})")
        if self._requested_port is not None:
            self._launch(self._requested_port, self._requested_cluster_port, timeout)
            return self
        # Ports of our choosing (see pick_port), so that a restart finds them still free; one
        # another process took first is replaced by another.
        attempts = 0
        while True:
            cluster = self._requested_cluster_port
            if cluster is None and self._clustered:
                cluster = pick_port()
            try:
                self._launch(pick_port(), cluster, timeout)
                return self
            except PortInUseError:
                attempts += 1
                if attempts == _PORT_ATTEMPTS:
                    raise

    def restart(self, timeout: float = 20.0) -> None:
        """Start again on the same client port, cluster port and store directory as the last run.

        Clients that keep the old URL reconnect to the new process. A running server is
        stopped first (gracefully); a killed one is simply started again. Ports that the
        server picked on the first run are reused as fixed ports now.
        """
        if self.running:
            self._terminate(signal.SIGTERM, 15.0)
        port = self._port if self._port is not None else self._requested_port
        cport = self._cluster_port if self._cluster_port is not None else self._requested_cluster_port
        self._launch(port, cport, timeout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        """Send ``sig`` to our process, wait up to ``timeout`` s, then SIGKILL it.

        Safe to call more than once. Removes the temporary directory of this object, which
        holds the store only when no ``store_dir`` was given.
        """
        self._terminate(sig, timeout)
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        OWNED.discard(self)

    def kill(self) -> None:
        """Kill the process at once (SIGKILL) and wait for it; the store directory is kept."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def __enter__(self) -> NatsServer:
        if not self.running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.url if self._port is not None else "not started"
        name = f" {self._name}" if self._name else ""
        return f"<NatsServer{name} {where} pid={self.pid}>"

    # -- internals -----------------------------------------------------------------------------

    def configure_cluster(
        self, *, cluster_port: int | None = None, routes: Sequence[str] | None = None
    ) -> None:
        """Used by :class:`NatsCluster` to wire members whose ports only become known later."""
        if cluster_port is not None:
            self._requested_cluster_port = cluster_port
        if routes is not None:
            self._routes = list(routes)

    def _ensure_workdir(self) -> Path:
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="jsworker-nats-"))
            OWNED.add(self)
        return self._workdir

    def _ports_dir(self) -> Path:
        return self._ensure_workdir() / "ports"

    def _args(self, binary: str, port: int | None, cluster_port: int | None) -> list[str]:
        args = [
            binary,
            "-js",
            "-a", HOST,
            "-p", str(port if port is not None else -1),
            "-m", "-1",
            "-sd", str(self.store_dir),
            "--ports_file_dir", str(self._ports_dir()),
        ]  # fmt: skip
        if self._name:
            args += ["-n", self._name]
        if self._clustered:
            if self._cluster_name:
                args += ["--cluster_name", self._cluster_name]
            cport = cluster_port if cluster_port is not None else -1
            args += ["--cluster", f"nats://{HOST}:{cport}"]
            if self._routes:
                args += ["--routes", ",".join(self._routes)]
        return args + self._extra_args

    def _launch(self, port: int | None, cluster_port: int | None, timeout: float) -> None:
        for fixed in (port, cluster_port if self._clustered else None):
            if fixed is not None and not port_is_free(fixed):
                raise PortInUseError(f"port {fixed} on {HOST} is already in use", fixed)
        binary = self._binary or find_nats_server()
        self.store_dir.mkdir(parents=True, exist_ok=True)
        ports_dir = self._ports_dir()
        ports_dir.mkdir(parents=True, exist_ok=True)
        for stale in ports_dir.glob("*.ports"):
            stale.unlink(missing_ok=True)
        log_file = self.log_file
        log_file.parent.mkdir(parents=True, exist_ok=True)
        args = self._args(binary, port, cluster_port)
        # The previous run's client and cluster ports stay known (restart() needs them if this
        # run fails); the monitoring port is new on every run.
        self._monitoring_url = None
        with log_file.open("ab") as log:
            # Only this run's lines count when explaining a failure.
            self._log_offset = log.tell()
            try:
                self._proc = subprocess.Popen(
                    args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
                )
            except OSError as exc:
                raise ServerNotFoundError(
                    f"cannot run nats-server {binary!r}: {exc}; {NOT_FOUND_HELP}"
                ) from exc
        OWNED.add(self)
        try:
            self._wait_ready(time.monotonic() + timeout, timeout)
        except BaseException:
            self.kill()
            raise

    def _wait_ready(self, deadline: float, timeout: float) -> None:
        proc = self._proc
        assert proc is not None
        while True:
            code = proc.poll()
            if code is not None:
                tail = self.log_tail()
                failed_bind = _failed_bind_line(tail)
                if failed_bind is not None:
                    found = re.search(rf"{re.escape(HOST)}:(\d+)", failed_bind)
                    port = int(found.group(1)) if found else None
                    where = f"port {port} on {HOST}" if port else "a port"
                    raise PortInUseError(f"{where} is already in use; nats-server said:\n{tail}", port)
                raise ServerStartError(
                    f"nats-server exited with code {code} while starting; log tail:\n{tail}"
                )
            if self._monitoring_url is None:
                self._read_ports_file(proc.pid)
            if self._monitoring_url is not None:
                status, _ = http_get(
                    f"{self._monitoring_url}/healthz?js-enabled-only=true",
                    timeout=min(HTTP_TIMEOUT, max(remaining(deadline), 0.1)),
                )
                if status == 200:
                    return
            if time.monotonic() >= deadline:
                waited_for = "JetStream readiness" if self._monitoring_url else "its ports file"
                raise ServerStartError(
                    f"nats-server (pid {proc.pid}) timed out after {timeout:g} s waiting for "
                    f"{waited_for}; log tail:\n{self.log_tail()}"
                )
            time.sleep(POLL)

    def _read_ports_file(self, pid: int) -> None:
        # The file is named <executable>_<pid>.ports; matching our pid (and not the executable
        # name, which depends on how the binary was installed) makes the ports certainly ours.
        for path in self._ports_dir().glob(f"*_{pid}.ports"):
            try:
                data: Any = json.loads(path.read_text(encoding="utf-8"))
                client = port_of(data["nats"][0])
                monitoring = str(data["monitoring"][0]).rstrip("/")
                cluster = port_of(data["cluster"][0]) if self._clustered else None
            except (OSError, ValueError, KeyError, IndexError, TypeError):
                # Read while the server was still writing it: try again on the next poll.
                return
            self._port, self._cluster_port, self._monitoring_url = client, cluster, monitoring
            return

    def _terminate(self, sig: int, timeout: float) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            # Popen.send_signal does nothing once the process has been reaped, so a reused
            # pid can never receive this signal.
            proc.send_signal(sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        try:
            with self.log_file.open("rb") as log:
                log.seek(self._log_offset)
                text = log.read().decode("utf-8", errors="replace")
        except OSError as exc:
            return f"(log {self.log_file} unreadable: {exc})"
        all_lines = text.rstrip().splitlines()
        # A bad argument makes the server print its reason followed by the whole usage text,
        # which would push the reason out of the tail.
        usage = next((i for i, line in enumerate(all_lines) if line.startswith("Usage:")), None)
        if usage is not None:
            all_lines = all_lines[:usage]
        kept = [line for line in all_lines if line.strip()][-lines:]
        return "\n".join(kept) if kept else "(the log is empty)"

    def jsz(self) -> dict[str, Any] | None:
        if self._monitoring_url is None or not self.running:
            return None
        status, body = http_get(f"{self._monitoring_url}/jsz")
        if status != 200:
            return None
        try:
            data = json.loads(body)
        except ValueError:
            return None
        return data if isinstance(data, dict) else None
