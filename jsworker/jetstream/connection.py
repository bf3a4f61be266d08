"""Connecting to NATS, and what the rest of jsworker needs to know about the connection."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import inspect
import os
import re
import ssl
from asyncio import FIRST_COMPLETED
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext

from .. import _config as config
from .._config import option
from .._errors import ConnectError, ServerVersionError
from .client import JetStreamClient, TLSNotOfferedError

DEFAULT_URL = "nats://127.0.0.1:4222"

Listener = Callable[[], Awaitable[None]]


# Subject tokens without the wildcards, separated by single dots.
_PREFIX = re.compile(r"[^\s.*>]+(\.[^\s.*>]+)*")


def parse_servers(value: str | Sequence[str] | None) -> list[str]:
    """Server URLs from a comma-separated string or a sequence of them; [] for none."""
    items = value.split(",") if isinstance(value, str) else (value or ())
    return [url.strip() for url in items if url.strip()]


_USER_INFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^\s/@]*@")


def redact_urls(text: str) -> str:
    """``text`` with the user information (user, password, token) of every URL in it removed:
    ``nats://admin:secret@host`` becomes ``nats://***@host``. For anything printed or logged."""
    return _USER_INFO.sub(r"\g<scheme>***@", text)


def default_servers() -> list[str]:
    """Servers from ``JSWORKER_URL`` (comma separated), else the local default."""
    return parse_servers(os.environ.get("JSWORKER_URL")) or [DEFAULT_URL]


@dataclass(frozen=True)
class ConnectOptions:
    """How to reach the NATS servers, and who we are to them.

    ``credentials`` (a ``.creds`` file) and ``nkey_seed`` (a seed file) are paths; TLS takes
    a CA bundle and, for mutual TLS, a client certificate and key. Secret values are kept out
    of ``repr``, so they never reach a log line. Each option with an environment variable
    falls back to it when built by :meth:`from_environment` (as an App does).
    """

    servers: Sequence[str] = option(
        default_factory=default_servers,
        env="URL",
        flag="--url",
        help="NATS server URL(s), comma separated [default: the app's, else JSWORKER_URL].",
    )
    user: str | None = option(None, env="USER", flag="--user", help="User name.")
    password: str | None = option(
        None,
        env="PASSWORD",
        flag="--password",
        help="Password (prefer JSWORKER_PASSWORD: flags are visible in ps).",
        repr=False,
    )
    token: str | None = option(
        None, env="TOKEN", flag="--token", help="Auth token (prefer JSWORKER_TOKEN).", repr=False
    )
    credentials: str | None = option(
        None, env="CREDS", flag="--creds", help="A .creds file (JWT + NKey seed)."
    )
    nkey_seed: str | None = option(None, env="NKEY_SEED", flag="--nkey-seed", help="An NKey seed file.")
    tls_ca: str | None = option(
        None, env="TLS_CA", flag="--tls-ca", help="CA bundle to verify the servers with."
    )
    tls_cert: str | None = option(
        None, env="TLS_CERT", flag="--tls-cert", help="Client certificate (mutual TLS)."
    )
    tls_key: str | None = option(
        None, env="TLS_KEY", flag="--tls-key", help="Client certificate key (mutual TLS)."
    )
    inbox_prefix: str | None = option(
        None,
        env="INBOX_PREFIX",
        flag="--inbox-prefix",
        help="Subject prefix of the app's reply inboxes [default: _jsw_inbox.<app>].",
    )
    connect_timeout: float = option(
        5.0,
        env="CONNECT_TIMEOUT",
        help="Seconds the first connection may take, all servers and attempts together.",
    )
    attempt_timeout: float = option(2.0, help="Seconds one connection attempt to one server may take.")
    reconnect_wait: float = option(0.5, help="Seconds between reconnect attempts to one server.")
    # Set by jsworker itself, not by users: the connection's name on the server, the inbox
    # prefix its replies come to (the app's prefix and the connection's role), and whether
    # the client checks each subject published to (False only for connections whose every
    # subject is a reply subject the server gave or one made of validated names: the check is
    # a regex search per publish).
    name: str | None = None
    inbox: str | None = None
    check_subjects: bool = True

    def __post_init__(self) -> None:
        # JSWORKER_URL and --url arrive as one comma-separated string.
        object.__setattr__(self, "servers", tuple(parse_servers(self.servers)) or (DEFAULT_URL,))
        for what in ("inbox_prefix", "inbox"):
            value = getattr(self, what)
            if value is not None and not _PREFIX.fullmatch(value):
                raise ConnectError(
                    f"{what} must be dot-separated subject tokens without wildcards or spaces, not {value!r}"
                )
        for what in ("connect_timeout", "attempt_timeout", "reconnect_wait"):
            object.__setattr__(
                self, what, config.parse_number(what, getattr(self, what), float, ConnectError)
            )

    @property
    def authenticated(self) -> bool:
        """Whether the connection presents credentials (options or a URL's user part): only
        then can the server hold it to permissions narrower than everything."""
        given = (self.user, self.token, self.credentials, self.nkey_seed)
        return any(v is not None for v in given) or any("@" in url.split("//", 1)[-1] for url in self.servers)

    @classmethod
    def from_environment(cls, **given: Any) -> ConnectOptions:
        """Options from ``given``, each one left out (or None) taken from its ``JSWORKER_*``
        variable when that is set."""
        return cls(**config.from_environment(cls, given))

    def client_kwargs(self) -> dict[str, Any]:
        """The authentication and TLS arguments of ``nats.connect``; raises ConnectError on bad files."""
        kwargs: dict[str, Any] = {}
        if not self.check_subjects and _CAN_SKIP_SUBJECT_CHECK:
            kwargs["skip_subject_validation"] = True
        if self.inbox is not None:
            kwargs["inbox_prefix"] = self.inbox
        if self.user is not None:
            kwargs["user"] = self.user
            kwargs["password"] = self.password
        if self.token is not None:
            kwargs["token"] = self.token
        if self.credentials is not None or self.nkey_seed is not None:
            _require_nkeys()
            for what, path in (("credentials", self.credentials), ("nkey seed", self.nkey_seed)):
                if path is not None and not os.path.isfile(path):
                    raise ConnectError(f"{what} file {path!r} does not exist")
            if self.credentials is not None:
                kwargs["user_credentials"] = self.credentials
            if self.nkey_seed is not None:
                kwargs["nkeys_seed"] = self.nkey_seed
        tls = self.tls_context()
        if tls is not None:
            kwargs["tls"] = tls
        return kwargs

    @property
    def requires_tls(self) -> bool:
        """TLS is configured in some way: a ``tls://`` URL, a CA or a client certificate."""
        return (
            self.tls_ca is not None
            or self.tls_cert is not None
            or any(url.lower().startswith("tls://") for url in self.servers)
        )

    def tls_context(self) -> ssl.SSLContext | None:
        """A TLS context when a CA or client certificate is configured, else None."""
        if self.tls_ca is None and self.tls_cert is None:
            return None
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConnectError("a TLS client certificate needs its key, and a key its certificate")
        try:
            context = ssl.create_default_context(cafile=self.tls_ca)
            if self.tls_cert is not None:
                context.load_cert_chain(self.tls_cert, self.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise ConnectError(f"cannot load TLS files: {exc}") from exc
        return context


#: How long closing a connection its loop's end left open may take (seconds).
_LOOP_END_CLOSE = 2.0

# Older nats-py releases neither check subjects nor take the option.
_CAN_SKIP_SUBJECT_CHECK = "skip_subject_validation" in inspect.signature(Client.connect).parameters


def _require_nkeys() -> None:
    if importlib.util.find_spec("nkeys") is None:
        raise ConnectError(
            "NKey and .creds authentication need the 'nkeys' package: pip install 'jsworker[nkeys]'"
        )


class _Listeners:
    """Who wants to hear of reconnects and disconnects; the client's callbacks exist before
    the :class:`Connection` does, so they reach its listeners through this."""

    def __init__(self) -> None:
        self.reconnect: list[Listener] = []
        self.disconnect: list[Listener] = []

    @staticmethod
    async def fire(listeners: list[Listener]) -> None:
        for listener in list(listeners):
            await listener()


class Connection:
    """A NATS connection with its JetStream context, owned by one event loop.

    It reconnects forever; interested parties (the pull loops) subscribe to reconnects so they
    can re-issue the pull requests that died with the old connection.
    """

    def __init__(
        self,
        nc: JetStreamClient,
        js: JetStreamContext,
        options: ConnectOptions,
        listeners: _Listeners | None = None,
    ) -> None:
        self.nc = nc
        self.js = js
        self.options = options
        self.loop = asyncio.get_running_loop()
        self._listeners = listeners or _Listeners()
        self._guard: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, options: ConnectOptions) -> Connection:
        """Connect, trying the server list for up to ``options.connect_timeout`` seconds.

        Raises :class:`ConnectError` (with the client's last error chained) when no server
        answers in time or a server refuses the credentials.
        """
        listeners = _Listeners()
        errors: list[Exception] = []
        refused = asyncio.Event()

        async def on_reconnect() -> None:
            await listeners.fire(listeners.reconnect)

        async def on_disconnect() -> None:
            await listeners.fire(listeners.disconnect)

        async def on_error(exc: Exception) -> None:
            # Every failed (re)connect attempt is reported here while the client keeps trying;
            # remember the last for the error message, and stop at once on bad credentials.
            if nc.denials.report(exc):
                return  # a refused subject: the call that needed it fails, the connection stays
            if refused.is_set():
                return  # keep the refusal: it, not the resets that follow it, is the cause
            errors[:] = [exc]
            if isinstance(exc, nats.errors.AuthorizationError | TLSNotOfferedError) or (
                "authorization" in str(exc).lower()
            ):
                refused.set()

        kwargs: dict[str, Any] = {
            "servers": list(options.servers),
            "name": options.name,
            "connect_timeout": options.attempt_timeout,
            "reconnect_time_wait": options.reconnect_wait,
            # Reconnect forever once connected; the first connect is bounded by the deadline.
            "max_reconnect_attempts": -1,
            "allow_reconnect": True,
            "reconnected_cb": on_reconnect,
            "disconnected_cb": on_disconnect,
            "error_cb": on_error,
        }
        kwargs.update(options.client_kwargs())

        nc = JetStreamClient()
        if options.requires_tls and not nc.guard_tls():
            raise ConnectError("this nats-py release gives no way to check that TLS is in use")
        connecting = asyncio.ensure_future(nc.connect(**kwargs))
        refusal = asyncio.ensure_future(refused.wait())
        try:
            await asyncio.wait(
                {connecting, refusal}, timeout=options.connect_timeout, return_when=FIRST_COMPLETED
            )
        except BaseException:
            # The caller was cancelled (a dashboard closing while its feed connects): the attempt
            # must not go on without it, as a client nobody closes that reconnects forever.
            refusal.cancel()
            await _abandon(nc, connecting)
            raise
        refusal.cancel()
        if connecting.done() and not connecting.cancelled():
            if (exc := connecting.exception()) is None:
                return cls(nc, nc.jetstream(), options, listeners)
            errors[:] = [exc]  # type: ignore[list-item]
        await _abandon(nc, connecting)
        last = errors[-1] if errors else None
        where = ", ".join(options.servers)
        raise ConnectError(redact_urls(f"cannot connect to NATS at {where}: {_describe(last)}")) from last

    @property
    def auth_required(self) -> bool:
        """Whether the server asks its clients for credentials (as its INFO says)."""
        info = getattr(self.nc, "_server_info", None)
        return isinstance(info, dict) and bool(info.get("auth_required"))

    @property
    def server_version(self) -> tuple[int, int, int]:
        """(major, minor, patch) of the server this connection is attached to."""
        version = self.nc.connected_server_version
        return (version.major, version.minor, version.patch)

    def require_version(self, feature: str, minimum: tuple[int, int, int]) -> None:
        """Raise :class:`ServerVersionError` when the server is older than ``minimum``."""
        if self.server_version < minimum:
            have = ".".join(map(str, self.server_version))
            need = ".".join(map(str, minimum))
            raise ServerVersionError(f"{feature} needs nats-server >= {need}; connected server is {have}")

    @property
    def max_payload(self) -> int:
        """Largest message the server accepts, in bytes."""
        return int(self.nc.max_payload)

    @property
    def is_connected(self) -> bool:
        """True while the socket is up (False while reconnecting)."""
        return bool(self.nc.is_connected)

    @property
    def is_closed(self) -> bool:
        """True once :meth:`close` ran or the client gave up."""
        return bool(self.nc.is_closed)

    def on_reconnect(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` after every reconnect; returns a function that unregisters it."""
        self._listeners.reconnect.append(listener)
        return lambda: self._listeners.reconnect.remove(listener)

    def on_disconnect(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` whenever the connection drops; returns an unregister function."""
        self._listeners.disconnect.append(listener)
        return lambda: self._listeners.disconnect.remove(listener)

    async def publish_nowait(self, subject: str, body: bytes) -> bool:
        """Publish without asking for an acknowledgement; False when it could not be sent.

        For records that must never hold up or fail the caller (job events): a stream on the
        subject stores the message, and nobody waits for it to say so.
        """
        try:
            await self.nc.publish(subject, body)
        except (nats.errors.Error, OSError):
            return False
        return True

    async def flush(self, timeout: float = 5.0) -> None:
        """Wait until everything published so far reached the server (best effort)."""
        if self.nc.is_connected:
            with contextlib.suppress(TimeoutError, nats.errors.Error):
                await self.nc.flush(timeout=max(1, round(timeout)))

    def close_with_loop(self) -> None:
        """Close this connection when its event loop ends, for an owner that may never call
        :meth:`close` (``asyncio.run(main())`` around an enqueue): a socket left open outlives
        the loop that could close it, and is only closed, with a ResourceWarning, whenever the
        garbage collector gets to it. ``asyncio.run`` cancels the tasks left when its
        coroutine returns; this connection's guard is one of them."""
        if self._guard is None:
            self._guard = self.loop.create_task(self._close_when_cancelled())

    async def _close_when_cancelled(self) -> None:
        try:
            await self.loop.create_future()  # never set: only the loop's end cancels it
        except asyncio.CancelledError:
            # Cancelled by close() (which has cleared the guard), or by the loop's end. Then
            # not drained: the loop's other tasks are being cancelled too, and every enqueue
            # made on this connection was acknowledged before its caller went on.
            if self._guard is not None:
                try:
                    with contextlib.suppress(nats.errors.Error, TimeoutError, OSError):
                        await asyncio.wait_for(self.nc.close(), _LOOP_END_CLOSE)
                finally:
                    self.nc.close_socket()
            raise

    async def close(self) -> None:
        """Flush what is pending and close; safe to call twice."""
        guard, self._guard = self._guard, None
        if guard is not None:
            guard.cancel()
        try:
            if self.nc.is_closed:
                return
            if self.nc.is_connected:
                with contextlib.suppress(nats.errors.Error, TimeoutError, OSError):
                    await self.nc.drain()
                    return
            # Reconnecting (nothing to drain to) or the drain failed: just close.
            with contextlib.suppress(nats.errors.Error, TimeoutError, OSError):
                await self.nc.close()
        finally:
            # Also when this close is cancelled or times out part-way (a caller's deadline):
            # no socket outlives it.
            self.nc.close_socket()


async def _abandon(nc: JetStreamClient, connecting: asyncio.Future[None]) -> None:
    """End a connect attempt that will not be used: the attempt, the client and its socket
    (a client left behind would reconnect forever, nobody closing it)."""
    connecting.cancel()
    with contextlib.suppress(BaseException):
        await connecting
    with contextlib.suppress(Exception):
        await nc.close()
    nc.close_socket()


def _describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no server answered"
    if isinstance(exc, nats.errors.NoServersError):
        return "no server answered"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
