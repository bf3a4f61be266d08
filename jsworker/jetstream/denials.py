"""Permissions the server refused, turned into an error at the call that needed them.

A server answers a publish or a subscription its user may not make with an asynchronous
``-ERR``, and nats-py hands that only to the connection's error callback: the request that
caused it would wait out its timeout (a producer then retried for its whole window and ended
in a false "may have been stored"). :class:`Denials` takes those reports and ends at once
every request waiting on the refused subject with :class:`PermissionDeniedError`.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass

from .._errors import PermissionDeniedError
from .._observability.logging import get_logger

log = get_logger("jsworker.client")

# As nats-py words the server's -ERR: 'nats: permissions violation for publish to "x"' or
# '... for subscription to "x"' (with ' using queue "q"' for a queue subscription). nats-py
# lower-cases the whole line, subject included, so subjects are compared in lower case.
_VIOLATION = re.compile(r'permissions violation for (publish|subscription) to "([^"]*)"', re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Denial:
    """One refusal: ``operation`` is ``"publish"`` or ``"subscribe"``; ``subject`` is in
    lower case (as the client reports it)."""

    operation: str
    subject: str

    def refuses(self, subject: str) -> bool:
        """True when this is the refusal of ``subject``."""
        return subject.lower() == self.subject

    def error(self, subject: str | None = None) -> PermissionDeniedError:
        """The error a caller that needed this permission gets, naming ``subject`` (the
        caller's own spelling of the refused subject) when given."""
        return PermissionDeniedError(self.operation, subject or self.subject)


Listener = Callable[[Denial], None]


def parse_denial(error: BaseException | str) -> Denial | None:
    """The refusal an error reported by the client stands for, or None when it is none."""
    found = _VIOLATION.search(str(error))
    if found is None:
        return None
    return Denial("publish" if found[1].lower() == "publish" else "subscribe", found[2].lower())


class Denials:
    """The refusals one connection met, and the requests and listeners that want to hear of them.

    A refused subscription to the connection's request inbox (``<inbox prefix>.…``) fails every
    request then and after, since no answer can reach it; a refused publish fails the requests
    to that subject. Listeners (a pull loop, say) hear every refusal.
    """

    def __init__(self) -> None:
        self.inbox_prefix = ""
        self.inbox_refused: Denial | None = None
        self._waiting: dict[str, dict[asyncio.Timeout, None]] = {}
        self._fired: dict[asyncio.Timeout, Denial] = {}
        self._listeners: list[Listener] = []
        self._logged: set[Denial] = set()
        self._publishes: dict[str, Denial] = {}
        # Subjects asked only to learn whether they are allowed: a refusal is an answer.
        self._probes: set[str] = set()

    def report(self, error: BaseException) -> bool:
        """Take an error the client reported; True when it was a refusal."""
        denial = parse_denial(error)
        if denial is None:
            return False
        if denial not in self._logged and denial.subject not in self._probes and len(self._logged) < 1000:
            self._logged.add(denial)
            log.error("nats.permission_denied", operation=denial.operation, subject=denial.subject)
        if denial.operation == "subscribe":
            if self.inbox_prefix and denial.subject.startswith(self.inbox_prefix.lower() + "."):
                self.inbox_refused = denial
            # No reply can reach a request whose inbox is refused; which one it was, the
            # server does not say.
            waiting = [scope for scopes in self._waiting.values() for scope in scopes]
        else:
            if len(self._publishes) >= 1000:
                self._publishes.clear()
            self._publishes[denial.subject] = denial
            waiting = [
                scope
                for subject, scopes in self._waiting.items()
                if denial.refuses(subject)
                for scope in scopes
            ]
        now = asyncio.get_running_loop().time()
        for scope in waiting:
            self._fired[scope] = denial
            scope.reschedule(now)
        for listener in list(self._listeners):
            listener(denial)
        return True

    def probing(self, subject: str) -> None:
        """Expect ``subject`` may be refused: its refusal is not logged (it still ends the
        request, which is how the caller learns of it)."""
        self._probes.add(subject.lower())

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with every refusal from now on; returns a function that stops it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def check(self) -> None:
        """Raise at once when requests cannot be answered on this connection."""
        if self.inbox_refused is not None:
            raise self.inbox_refused.error()

    def watch(self, subject: str) -> asyncio.Timeout:
        """A scope that ends a request to ``subject`` when the server refuses it: enter it
        around the request, ask :meth:`refusal` when it times out, and :meth:`done` after."""
        scope = asyncio.timeout(None)
        self._waiting.setdefault(subject, {})[scope] = None
        return scope

    def refusal(self, subject: str, scope: asyncio.Timeout) -> PermissionDeniedError | None:
        """The refusal that ended ``scope`` (a request to ``subject``), if one did."""
        denial = self._fired.pop(scope, None)
        if denial is None:
            return None
        return denial.error(subject if denial.operation == "publish" else None)

    def publish_refusal(self, subject: str) -> PermissionDeniedError | None:
        """The refusal of a publish to ``subject`` met so far on this connection, if any."""
        denial = self._publishes.get(subject.lower())
        return denial.error(subject) if denial is not None else None

    def done(self, subject: str, scope: asyncio.Timeout) -> None:
        """Forget ``scope``."""
        waiting = self._waiting.get(subject)
        if waiting is not None:
            waiting.pop(scope, None)
            if not waiting:
                del self._waiting[subject]
        self._fired.pop(scope, None)
