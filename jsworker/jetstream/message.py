"""A message to store in JetStream, what the server says about it, and the size rule."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from .._errors import NoStreamError as NoStreamError
from .._errors import PayloadTooLargeError as PayloadTooLargeError
from .._wire.headers import MSG_ID


class OutMessage(NamedTuple):
    """A message to store: subject, body and headers (which must include ``Nats-Msg-Id``).

    A named tuple rather than a frozen dataclass: one is built per job, and tuples are built
    several times faster.
    """

    subject: str
    body: bytes
    headers: Mapping[str, str]

    @property
    def size(self) -> int:
        """Bytes the server counts against ``max_payload``: body plus the encoded header block."""
        header_block = len(b"NATS/1.0\r\n\r\n") + sum(
            len(k.encode()) + len(v.encode()) + 4 for k, v in self.headers.items()
        )
        return len(self.body) + header_block


def check_size(msg: OutMessage, max_payload: int) -> None:
    """Raise :class:`PayloadTooLargeError` before sending a message the server would refuse.

    The client checks only the body; an oversized header block gets the connection closed by
    the server for good, so it must never be sent.
    """
    # A character is at most 4 bytes in UTF-8 (plus 4 bytes of ": " and CRLF per header, 14 of
    # framing): a bound without encoding anything, enough for all but messages near the limit.
    # A plain loop: a generator under sum() took twice as long, once per job of a bulk enqueue.
    bound = len(msg.body) + 14
    for k, v in msg.headers.items():
        bound += 4 * (len(k) + len(v)) + 4
    if bound > max_payload and msg.size > max_payload:
        raise PayloadTooLargeError(
            f"the message for {msg.headers.get(MSG_ID) or msg.subject} is {msg.size} bytes with its headers; "
            "the server accepts "
            f"at most {max_payload} bytes per message (max_payload)"
        )


class Stored(NamedTuple):
    """What the server said about a stored message."""

    seq: int
    duplicate: bool


def stored_from(answer: Mapping[str, Any]) -> Stored:
    """The :class:`Stored` of the server's acknowledgement (its JSON body); ValueError when
    it has no sequence."""
    try:
        return Stored(int(answer["seq"]), bool(answer.get("duplicate", False)))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"an acknowledgement without a sequence: {answer!r:.200}") from exc


def headers_of(msg: OutMessage) -> dict[str, str]:
    """The headers as the client takes them."""
    # The client takes a dict and does not change it: no copy when it already is one.
    headers = msg.headers
    return headers if isinstance(headers, dict) else dict(headers)
