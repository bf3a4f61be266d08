"""The nats-py client jsworker connects with: the same client, faster on a worker's hot path.

* Every job message carries headers, and nats-py parses each header block line by line in
  Python, a sixth of a busy worker's time per no-op job. Header blocks as the servers and
  clients write them are read by :class:`~jsworker.jetstream.headers.HeaderShapes`; any
  other block, status lines included, goes to nats-py's own parser, so the headers a message
  gets are the same either way.
* Acks go out in batches; :meth:`JetStreamClient.publish_many` queues a batch as one
  protocol command instead of one ``publish`` call per message.
* The pull loop's inbox takes its messages straight from the client's read loop
  (:meth:`JetStreamClient.subscribe_direct`), without a ``Msg``, a queue and a task hop each,
  and a handler that needs nothing awaited costs no coroutine.
* The read loop's protocol parser is :class:`~jsworker.jetstream.fastparse.FastParser`, which
  reads messages at an offset instead of cutting its buffer after each one.

These fast paths use nats-py internals, and this module is the only place in jsworker that
does. :data:`INTERNALS` lists every one; at connect, :meth:`JetStreamClient.enable_fast_path`
checks them and turns the fast paths on only when all are as expected. Otherwise it logs one
warning and every call takes nats-py's public path: a nats-py release can make the worker
slower, never wrong.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.protocol.parser import Parser

from .._observability.logging import get_logger
from .denials import Denials
from .fastparse import FastParser
from .headers import HeaderShapes, encode_headers

log = get_logger("jsworker.client")

#: The ack protocol's verbs as sent to a message's reply subject (a nak may add a delay, a
#: term a reason).
ACK, NAK, WPI, TERM = b"+ACK", b"-NAK", b"+WPI", b"+TERM"
# What follows the subject in the PUB of each payload-only ack verb: " <size>\r\n<verb>\r\n".
_VERB_TAILS = {verb: b" %d\r\n%s\r\n" % (len(verb), verb) for verb in (ACK, NAK, WPI, TERM)}

#: ``(subject, reply, headers, payload)`` for :meth:`JetStreamClient.publish_headed_many`.
HeadedMessage = tuple[str, str, Mapping[str, str], bytes]

#: Called with a message's subject, reply subject, body and headers (None when it has none);
#: what it returns, when not None, is awaited before the next message is read.
DirectHandler = Callable[[str, str, bytes, "dict[str, str] | None"], "Awaitable[None] | None"]


@dataclass(frozen=True, slots=True)
class Internal:
    """One nats-py internal the fast paths rely on, and what it must look like.

    ``method`` internals are checked on the class: a coroutine function (when ``coroutine``)
    whose parameters start with ``params``. ``attribute`` internals are checked on a connected
    client: present, and an instance of ``kind``.
    """

    name: str
    what: str  # "method" or "attribute"
    params: tuple[str, ...] = ()
    coroutine: bool = False
    kind: type | tuple[type, ...] = object


#: Every nats-py private name jsworker uses, and why.
INTERNALS: tuple[Internal, ...] = (
    # Overridden: the read loop's per-message entry point (the direct route) ...
    Internal("_process_msg", "method", ("self", "sid", "subject", "reply", "data", "headers"), True),
    # ... and the header parser (plain blocks parsed here).
    Internal("_process_headers", "method", ("self", "headers"), True),
    # Overridden: unsubscribing ends a direct route.
    Internal("_remove_sub", "method", ("self", "sid", "max_msgs")),
    # Called by publish_many: queue bytes for the socket, and wake the flusher.
    Internal("_send_command", "method", ("self", "cmd"), True),
    Internal("_flush_pending", "method", ("self",), True),
    # Read by publish_many: the limits and state nats-py's own publish checks.
    Internal("_max_payload", "attribute", kind=int),
    Internal("_pending_data_size", "attribute", kind=int),
    Internal("_max_pending_size", "attribute", kind=int),
    Internal("_flush_queue", "attribute"),
    # Called by the direct route with a handler's error, as nats-py does with its own.
    Internal("_error_cb", "attribute"),
    # Replaced: the read loop's protocol parser (see .fastparse), whose buffer and state the
    # replacement takes over.
    Internal("_ps", "attribute", kind=Parser),
    # Read by subscribe_direct: which subscription a message belongs to.
    Internal("_subs", "attribute", kind=dict),
    # Overridden: the TLS guard refuses to build CONNECT (credentials) over plain TCP ...
    Internal("_connect_command", "method", ("self",)),
    # ... reading what nats-py itself decides TLS by.
    Internal("_server_info", "attribute", kind=dict),
    # Closed by close_socket when nats-py's own close did not get that far.
    Internal("_transport", "attribute"),
)

#: The subscription's id, read by subscribe_direct; checked on every subscription it makes.
SUBSCRIPTION_ID = "_id"


def internals_problems(client: Client) -> list[str]:
    """What differs from :data:`INTERNALS` in ``client``'s nats-py (empty when nothing does).

    Attributes are checked only on a connected client; before that they may not exist yet.
    """
    problems: list[str] = []
    for internal in INTERNALS:
        if internal.what == "method":
            found = getattr(Client, internal.name, None)
            if found is None or not callable(found):
                problems.append(f"Client.{internal.name} is missing")
                continue
            if internal.coroutine and not inspect.iscoroutinefunction(found):
                problems.append(f"Client.{internal.name} is no longer a coroutine function")
            params = tuple(inspect.signature(found).parameters)
            if params[: len(internal.params)] != internal.params:
                problems.append(f"Client.{internal.name}{params} is not {internal.params}")
        elif client.is_connected:
            value = getattr(client, internal.name, _MISSING)
            if value is _MISSING:
                problems.append(f"Client.{internal.name} is missing")
            elif not isinstance(value, internal.kind):
                problems.append(f"Client.{internal.name} is a {type(value).__name__}")
    if client.is_connected and not callable(getattr(getattr(client, "_flush_queue", None), "empty", None)):
        problems.append("Client._flush_queue has no empty()")
    if not isinstance(getattr(client, "stats", None), dict):
        problems.append("Client.stats is not a dict")
    parser = getattr(client, "_ps", None)
    if isinstance(parser, Parser) and not (
        isinstance(getattr(parser, "buf", None), bytearray)
        and isinstance(getattr(parser, "state", None), int)
    ):
        problems.append("Parser has no bytearray buf and int state")
    return problems


_MISSING = object()
_warned = False


class TLSNotOfferedError(nats.errors.Error):
    """TLS is configured but the server did not start it: nothing, credentials included, was
    sent to it."""

    def __str__(self) -> str:
        return (
            "the server did not offer TLS although TLS is configured (a tls:// URL, a CA or a "
            "client certificate); refusing to send credentials in plain text"
        )


class JetStreamClient(Client):
    """nats-py's client with :class:`~jsworker.jetstream.headers.HeaderShapes` in front of its
    header parser,
    :meth:`publish_many` for batches of small messages and :meth:`subscribe_direct`.

    The fast paths are off until :meth:`enable_fast_path` found nats-py's internals as
    expected; until then (or if it did not) every method here uses nats-py's public API.
    """

    def __init__(self) -> None:
        super().__init__()
        self._direct: dict[int, DirectHandler] = {}
        self._header_blocks: dict[int, tuple[Mapping[str, str], bytes]] = {}
        self._header_shapes: HeaderShapes = HeaderShapes()
        self.fast_path = False
        self._require_tls: bool = False
        self.denials = Denials()

    def guard_tls(self) -> bool:
        """Refuse, from now on, to send CONNECT (credentials) over a connection on which TLS
        did not start; call before connecting when TLS is configured. False when this nats-py
        offers no way to tell (then do not connect: fail closed)."""
        if not callable(getattr(Client, "_connect_command", None)):
            return False
        self._require_tls = True
        return True

    def close_socket(self) -> None:
        """Close the socket, whatever state nats-py's own close or drain reached, and let
        the client end without reconnecting. One cancelled or timed out part-way leaves the
        socket open (and a drain's client running): only the garbage collector closed it
        then, with a ResourceWarning, perhaps after the loop that owned it was gone. The read
        loop, if it still runs, reads the end of the socket and closes the client as for a
        connection lost with reconnecting off. After a close that finished, this does nothing."""
        self.options["allow_reconnect"] = False
        transport = getattr(self, "_transport", None)
        if transport is not None:
            with contextlib.suppress(Exception):  # closing what may already be closed
                transport.close()

    async def connect(self, *args: Any, **kwargs: Any) -> None:
        """nats-py's ``connect``, then :meth:`enable_fast_path`."""
        self.denials.inbox_prefix = str(kwargs.get("inbox_prefix", "_INBOX"))
        await super().connect(*args, **kwargs)
        self.enable_fast_path()

    async def request(
        self,
        subject: str,
        payload: bytes = b"",
        timeout: float = 0.5,
        old_style: bool = False,
        headers: dict[str, Any] | None = None,
    ) -> Msg:
        """nats-py's ``request``, ended at once with :class:`PermissionDeniedError` when the
        server refuses the publish or the inbox it needs (every JetStream API call and every
        acknowledged publish is one of these)."""
        denials = self.denials
        denials.check()
        scope = denials.watch(subject)
        try:
            async with scope:
                return await super().request(
                    subject, payload, timeout=timeout, old_style=old_style, headers=headers
                )
        except TimeoutError:
            denied = denials.refusal(subject, scope)
            if denied is not None and denied.operation == "subscribe":
                # The server answers the inbox's subscription before the publish that came
                # after it: a refusal of the publish itself, more to the point, may be on its
                # way. One round trip makes sure it has arrived.
                with contextlib.suppress(nats.errors.Error, TimeoutError):
                    await self.flush(timeout=max(1, round(timeout)))
                denied = denials.publish_refusal(subject) or denied
            if denied is not None:
                raise denied from None
            raise
        finally:
            denials.done(subject, scope)

    def enable_fast_path(self) -> bool:
        """Check nats-py's internals on this connected client and, if they are as expected,
        route messages and headers through the fast paths; True when they are on.

        Logs one warning per process when they are not, naming what differs.
        """
        global _warned
        problems = internals_problems(self)
        if problems:
            if not _warned:
                _warned = True
                log.warning("client.fast_path_off", nats_py_changed=problems)
            return False
        # Instance attributes shadow the class's methods: nats-py's read loop and its own
        # _process_msg look these names up on the instance.
        self._process_msg = self._direct_process_msg  # type: ignore[method-assign]
        self._process_headers = self._plain_process_headers  # type: ignore[method-assign]
        self._remove_sub = self._direct_remove_sub  # type: ignore[method-assign]
        # The read loop looks its parser up on each read: the next one goes to the new parser,
        # which takes over what the old one had buffered and where it stood.
        fast = FastParser(self)
        fast.__dict__.update({k: v for k, v in vars(self._ps).items() if k != "nc"})
        self._ps = fast
        self.fast_path = True
        return True

    async def subscribe_direct(self, subject: str, handler: DirectHandler) -> Subscription:
        """Subscribe to ``subject`` with ``handler`` called from the client's read loop.

        Messages reach the handler in the order they arrive, one at a time; while it runs,
        nothing else is read, so it must be quick. What it raises goes to the connection's
        error callback. Unsubscribing (or draining) the returned subscription ends the route.
        Without the fast path, the handler is an ordinary subscription callback.
        """

        # nats-py's ordinary route: without the fast path, or for a message that reached the
        # subscription's queue instead of the direct route.
        async def queued(msg: Msg) -> None:
            pending = handler(msg.subject, msg.reply, msg.data, msg.headers)
            if pending is not None:
                await pending

        sub = await self.subscribe(subject, cb=queued)
        sid = getattr(sub, SUBSCRIPTION_ID, None)
        if self.fast_path and isinstance(sid, int) and self._subs.get(sid) is sub:
            self._direct[sid] = handler
        return sub

    async def publish_many(self, messages: Sequence[tuple[str, bytes]]) -> None:
        """Publish ``(subject, payload)`` messages without headers or reply, in this order.

        The subjects are not checked: they must be valid (reply subjects the server gave).
        Raises what ``publish`` raises when the connection is closed, draining, or cannot
        buffer them while it reconnects.
        """
        if not messages:
            return
        if not self.fast_path:
            for subject, payload in messages:
                await self.publish(subject, payload)
            return
        sizes = [len(p) for _, p in messages]
        size = sum(sizes)
        self._check_batch(max(sizes), size)
        # The ack protocol's verbs are most of what goes through here: their part after the
        # subject is made once (_VERB_TAILS), not formatted per message.
        tails = _VERB_TAILS.get
        command = b"".join(
            [b"PUB " + s.encode() + (tails(p) or b" %d\r\n%s\r\n" % (len(p), p)) for s, p in messages]
        )
        await self._send_many(command, len(messages), size)

    async def publish_headed_many(self, messages: Sequence[HeadedMessage], *, shared: bool = True) -> None:
        """Publish ``(subject, reply, headers, payload)`` messages, in this order, as
        :meth:`publish_many` does. With ``shared`` (many messages with one headers mapping),
        a header block is encoded once per mapping, which must not be changed after it was
        published; without, once per message. Header names and values are not checked: they
        must be valid (built from checked names, ids and the caller's checked headers)."""
        if not messages:
            return
        if not self.fast_path:
            for subject, reply, headers, payload in messages:
                await self.publish(subject, payload, reply=reply, headers=dict(headers))
            return
        parts: list[bytes] = []
        largest = total = 0
        blocks = self._header_blocks
        for subject, reply, headers, payload in messages:
            if not shared:
                block = encode_headers(headers)
            else:
                # Callers reuse one headers mapping for many messages: keyed by identity (the
                # entry keeps the mapping alive, so its id is not reused), not by its items.
                cached = blocks.get(id(headers))
                if cached is None or cached[0] is not headers:
                    if len(blocks) > 64:  # headers that vary per message are not worth keeping
                        blocks.clear()
                    cached = blocks[id(headers)] = (headers, encode_headers(headers))
                block = cached[1]
            size = len(block) + len(payload)
            total += size
            if size > largest:
                largest = size
            parts.append(
                b"HPUB %s %s %d %d\r\n%s%s\r\n"
                % (subject.encode(), reply.encode(), len(block), size, block, payload)
            )
        self._check_batch(largest, total)
        await self._send_many(b"".join(parts), len(messages), total)

    def _check_batch(self, largest: int, total: int) -> None:
        # What nats-py's own publish checks, for a whole batch of messages whose largest
        # payload is ``largest`` bytes and whose payloads add up to ``total``.
        if self.is_closed:
            raise nats.errors.ConnectionClosedError
        if self.is_draining_pubs:
            raise nats.errors.ConnectionDrainingError
        if largest > self._max_payload:
            raise nats.errors.MaxPayloadError
        if not self.is_connected and (
            self._max_pending_size <= 0 or total + self._pending_data_size > self._max_pending_size
        ):
            raise nats.errors.OutboundBufferLimitError

    async def _send_many(self, command: bytes, count: int, payload_size: int) -> None:
        self.stats["out_msgs"] += count
        self.stats["out_bytes"] += payload_size
        await self._send_command(command)
        if self._flush_queue is not None and self._flush_queue.empty():
            await self._flush_pending()

    def _connect_command(self) -> bytes:
        # nats-py starts TLS only when the server's INFO asks for it, whatever the client is
        # configured with, and then sends CONNECT, credentials included. Built here, CONNECT
        # is refused over a connection that TLS was configured for but did not get. A nats-py
        # without this method never calls it: Connection.open refuses TLS then (fail closed).
        if self._require_tls and not self.options.get("tls_handshake_first"):
            info = getattr(self, "_server_info", None)
            if not isinstance(info, dict) or not info.get("tls_required"):
                raise TLSNotOfferedError
        command: bytes = super()._connect_command()
        return command

    # -- the fast paths, installed by enable_fast_path ---------------------------------------

    async def _direct_process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        pending = self.dispatch(sid, subject, reply, data, headers)
        if pending is not None:
            await pending

    def dispatch(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> Awaitable[None] | None:
        """Hand one message to its subscription: a direct route's handler is called here and
        now; what is left to await (the handler's, nats-py's own route) is returned."""
        handler = self._direct.get(sid)
        if handler is None:
            # None for no headers, as nats-py's own parser passes it (its annotation says bytes).
            return Client._process_msg(self, sid, subject, reply, data, headers)  # type: ignore[arg-type]
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        parsed = self._header_shapes.parse(headers) if headers else None
        if headers and parsed is None:
            return self._handle_parsed(handler, subject, reply, data, headers)
        try:
            pending = handler(subject.decode(), reply.decode(), data, parsed)
        except Exception as exc:  # the read loop would take it for a broken connection
            return self._error_cb(exc)
        return None if pending is None else self._guarded(pending)

    async def _handle_parsed(
        self, handler: DirectHandler, subject: bytes, reply: bytes, data: bytes, headers: bytes
    ) -> None:
        # A header block the plain parser leaves to nats-py's (a status line, odd spacing).
        parsed = await Client._process_headers(self, headers)
        try:
            pending = handler(subject.decode(), reply.decode(), data, parsed)
            if pending is not None:
                await pending
        except Exception as exc:
            await self._error_cb(exc)

    async def _guarded(self, pending: Awaitable[None]) -> None:
        try:
            await pending
        except Exception as exc:
            await self._error_cb(exc)

    def _direct_remove_sub(self, sid: int, max_msgs: int = 0) -> None:
        self._direct.pop(sid, None)
        Client._remove_sub(self, sid, max_msgs)

    async def _plain_process_headers(self, headers: bytes) -> dict[str, str] | None:
        if headers:
            plain = self._header_shapes.parse(headers)
            if plain is not None:
                return plain
        parsed: dict[str, str] | None = await Client._process_headers(self, headers)
        return parsed

    @property
    def direct_routes(self) -> int:
        """Subscriptions currently served by the direct route."""
        return len(self._direct)
