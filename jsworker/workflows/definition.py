"""What a workflow keeps on the server, in the job stream beside its jobs (so that a step and
the state write that records it are stored in one atomic batch):

* ``jsw.<app>.flow.def.<id>``: its definition, written once by whoever starts it, with its
  first jobs in the same batch; workers read the first message of the subject, so a second
  one published later changes nothing;
* ``jsw.<app>.flow.state.<id>``: its state, written by workers only, each write expecting the
  subject's last sequence (compare-and-set) and rolling the older ones up.

Both expire ``ttl`` seconds after their last write (per-message TTL): a workflow must finish
within it. Job ids derive from the workflow's id (:func:`step_id`), so a step redelivered after
it enqueued the next one is refused as a duplicate and cannot enqueue it twice.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ..jetstream.message import OutMessage
from ..naming import Namespace
from ..serializers import Serializer
from ..wire import CONTENT_TYPE, EXPECTED_LAST_SUBJECT_SEQ

#: Header naming the workflow a job is a step of, and which step (``0``, ``1``... of a
#: chain; ``m0``, ``m1``... of a group; ``cb`` a chord's callback; ``err`` an error callback).
FLOW = "Jsw-Flow"
FLOW_STEP = "Jsw-Flow-Step"
#: Servers with atomic batch publish and per-message TTLs.
WORKFLOWS_SINCE = (2, 12, 0)
#: What a group does when a member ends without a result.
OnFailure = Literal["stop", "continue", "ignore"]
_TTL = "Nats-TTL"
_ROLLUP = "Nats-Rollup"


def def_subject(ns: Namespace, flow_id: str) -> str:
    """Subject of a workflow's definition."""
    return f"jsw.{ns.app}.flow.def.{flow_id}"


def state_subject(ns: Namespace, flow_id: str) -> str:
    """Subject of a workflow's state."""
    return f"jsw.{ns.app}.flow.state.{flow_id}"


def done_subject(ns: Namespace, flow_id: str, member: int | str = "*") -> str:
    """Subject of a group member's result (and of a chain's final result, at its last step);
    ``*``: every member's."""
    return f"jsw.{ns.app}.flow.done.{flow_id}.{member}"


def step_id(flow_id: str, step: str) -> str:
    """The job id of ``step`` of workflow ``flow_id``: a chain's first step has the workflow's
    own id (so a job with callbacks keeps its id), every other step the id and its label."""
    return flow_id if step == "0" else f"{flow_id}-{step}"


@dataclass(frozen=True)
class FlowDef:
    """A workflow: a ``chain`` of steps run one after the other, or a ``group`` of members
    run together with an optional ``callback`` (a chord) once all have ended; ``on_error``
    runs instead when the workflow fails, ``on_success`` (a batch's) after ``callback`` when
    no member failed. Steps are :meth:`Signature.describe` dicts."""

    id: str
    kind: Literal["chain", "group"]
    steps: list[dict[str, Any]]
    callback: dict[str, Any] | None = None
    on_error: dict[str, Any] | None = None
    on_failure: OnFailure = "stop"
    #: A batch's second callback: after every member ended, only if none failed.
    on_success: dict[str, Any] | None = None

    def encode(self, serializer: Serializer) -> bytes:
        """The definition as stored (the app's serializer: arguments go through it)."""
        return serializer.dumps(asdict(self))

    @classmethod
    def decode(cls, serializer: Serializer, data: bytes) -> FlowDef:
        """The definition stored in ``data``; ValueError when it is not one."""
        raw = serializer.loads(data)
        if not isinstance(raw, dict) or raw.get("kind") not in ("chain", "group"):
            raise ValueError("not a workflow definition")
        return cls(**raw)

    def message(self, ns: Namespace, serializer: Serializer, ttl: float) -> OutMessage:
        """The definition's message: stored only where none is (a second start of the same
        id is refused as a whole)."""
        headers = {
            EXPECTED_LAST_SUBJECT_SEQ: "0",
            _TTL: str(int(ttl)),
            CONTENT_TYPE: serializer.content_type,
        }
        return OutMessage(def_subject(ns, self.id), self.encode(serializer), headers)


@dataclass
class FlowState:
    """Where a workflow is: the chain step running, the group members that failed under
    ``stop``, and how it ended (``ended``: ``succeeded``, ``failed``, ``cancelled``,
    ``expired``; ``at``: the step; ``reason``). ``seq`` is the state message's sequence (0:
    none written yet)."""

    seq: int = 0
    step: int = 0
    failed: list[int] = field(default_factory=list)
    ended: str | None = None
    at: str | None = None
    reason: str = ""

    @classmethod
    def decode(cls, seq: int, data: bytes) -> FlowState:
        """The state stored at ``seq``."""
        raw = json.loads(data)
        return cls(
            seq,
            int(raw.get("step", 0)),
            list(raw.get("failed", [])),
            raw.get("ended"),
            raw.get("at"),
            str(raw.get("reason", "")),
        )

    def message(self, ns: Namespace, flow_id: str, ttl: float) -> OutMessage:
        """The write of this state over the one at :attr:`seq` (refused if that moved)."""
        body = json.dumps(
            {"step": self.step, "failed": self.failed,
             "ended": self.ended, "at": self.at, "reason": self.reason},
            separators=(",", ":"),
        ).encode()  # fmt: skip
        headers = {EXPECTED_LAST_SUBJECT_SEQ: str(self.seq), _TTL: str(int(ttl)), _ROLLUP: "sub"}
        return OutMessage(state_subject(ns, flow_id), body, headers)
