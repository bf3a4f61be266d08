"""What a workflow keeps on the server, in the job stream beside its jobs (so that a step and
the state write that records it are stored in one atomic batch):

* ``jsw.<app>.flow.def.<id>``: its definition, written once by whoever starts it, with its
  first jobs in the same batch; workers read the first message of the subject, so a second
  one published later changes nothing;
* ``jsw.<app>.flow.state.<id>``: its state, written by workers only, each write expecting the
  subject's last sequence (compare-and-set) and rolling the older ones up. It records the
  stream sequence of every job the workers enqueued for it (see :mod:`.trust`).

Both expire ``ttl`` seconds after their last write (per-message TTL): a workflow must finish
within it. Job ids derive from the workflow's id (:func:`step_id`), so a step redelivered after
it enqueued the next one is refused as a duplicate and cannot enqueue it twice.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .._core.serializers import Serializer
from .._wire.headers import CONTENT_TYPE, EXPECTED_LAST_SUBJECT_SEQ
from .._wire.names import Namespace
from ..jetstream.atomic import MAX_BATCH
from ..jetstream.limits_stream import LimitsStream, StoredMessage
from ..jetstream.message import OutMessage

#: Header naming the workflow a job is a step of, and which step (``0``, ``1``... of a
#: chain; ``m0``, ``m1``... of a group; ``cb`` a chord's callback; ``err`` an error callback).
FLOW = "Jsw-Flow"
FLOW_STEP = "Jsw-Flow-Step"
#: Header of a workflow's definition: an id of the start that stored it, by which a start
#: whose answer was lost tells its own write from another start of the same workflow id.
START = "Jsw-Flow-Start"
#: Servers with atomic batch publish and per-message TTLs.
WORKFLOWS_SINCE = (2, 12, 0)
#: What a group does when a member ends without a result.
OnFailure = Literal["stop", "continue", "ignore"]
_TTL = "Nats-TTL"


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

    def described(self, step: str) -> dict[str, Any] | None:
        """The description of ``step`` (a label as in :data:`FLOW_STEP`), or None when the
        workflow has no such step."""
        if step in ("cb", "ok", "err"):
            return {"cb": self.callback, "ok": self.on_success, "err": self.on_error}[step]
        index = step_index(self, step)
        return self.steps[index] if index is not None else None

    def job_id(self, step: str) -> str | None:
        """The job id of ``step``: the one it was set to, or the one derived from the
        workflow's; None when the workflow has no such step."""
        described = self.described(step)
        if described is None:
            return None
        return str(described.get("job_id") or step_id(self.id, step))

    def first_position(self, step: str) -> int | None:
        """Where the start stored ``step``'s job in the atomic batch that holds the definition
        (1: right after it), or None for a step the start did not store there: a chain's first
        step, and each member of a group that fits the batch."""
        index = step_index(self, step)
        if index is None or index + 1 >= MAX_BATCH or (self.kind == "chain" and index > 0):
            return None
        return index + 1

    def message(self, ns: Namespace, serializer: Serializer, ttl: float) -> OutMessage:
        """The definition's message: stored only where none is (a second start of the same
        id is refused as a whole), marked with a new :data:`START` id each time."""
        headers = {
            EXPECTED_LAST_SUBJECT_SEQ: "0",
            _TTL: str(int(ttl)),
            CONTENT_TYPE: serializer.content_type,
            START: uuid.uuid4().hex,
        }
        return OutMessage(def_subject(ns, self.id), self.encode(serializer), headers)


def step_index(flow: FlowDef, step: str) -> int | None:
    """The index in ``flow.steps`` of ``step`` (``2`` of a chain, ``m2`` of a group), or None
    when it names none of them."""
    digits = step if flow.kind == "chain" else step[1:] if step.startswith("m") else ""
    if not digits.isdigit() or digits != str(int(digits)) or int(digits) >= len(flow.steps):
        return None
    return int(digits)


@dataclass
class FlowState:
    """Where a workflow is: the chain step running, the group members that failed under
    ``stop``, and how it ended (``ended``: ``succeeded``, ``failed``, ``cancelled``,
    ``expired``; ``at``: the step; ``reason``). ``seq`` is the state message's sequence (0:
    none written yet). ``jobs``: the stream sequence of each job a worker enqueued with a
    state write, by step label. A write stores the labels of the messages of its batch in
    order (``wrote``: the job right after the state message first); whoever reads that state
    knows its sequence, so it knows theirs."""

    seq: int = 0
    step: int = 0
    failed: list[int] = field(default_factory=list)
    ended: str | None = None
    at: str | None = None
    reason: str = ""
    jobs: dict[str, int] = field(default_factory=dict)

    @classmethod
    def decode(cls, seq: int, data: bytes) -> FlowState:
        """The state stored at ``seq``."""
        raw = json.loads(data)
        jobs = {str(k): int(v) for k, v in raw.get("jobs", {}).items()}
        # The batch of this write followed its state message, in the order it names.
        jobs.update({label: seq + 1 + i for i, label in enumerate(raw.get("wrote", [])) if label})
        return cls(
            seq,
            int(raw.get("step", 0)),
            list(raw.get("failed", [])),
            raw.get("ended"),
            raw.get("at"),
            str(raw.get("reason", "")),
            jobs,
        )

    def message(self, ns: Namespace, flow_id: str, ttl: float, wrote: list[str] | None = None) -> OutMessage:
        """The write of this state over the one at :attr:`seq` (refused if that moved), stored
        first in a batch whose other messages are the steps ``wrote`` names in order (an empty
        label for a message that is no job)."""
        body = json.dumps(
            {"step": self.step, "failed": self.failed, "ended": self.ended, "at": self.at,
             "reason": self.reason, "jobs": self.jobs, "wrote": wrote or []},
            separators=(",", ":"),
        ).encode()  # fmt: skip
        # No rollup: the job stream, which producers write, honours none. Earlier states stay
        # until their time to live; readers take the last.
        headers = {EXPECTED_LAST_SUBJECT_SEQ: str(self.seq), _TTL: str(int(ttl))}
        return OutMessage(state_subject(ns, flow_id), body, headers)


def written_by_jsworker(msg: StoredMessage) -> bool:
    """Whether ``msg`` was written by a workflow's start or its workers, which always send
    headers. The server itself stores its answers (a publish's acknowledgement, an API
    response) on whatever reply subject a publisher named, a workflow's subjects included,
    and such a message carries none."""
    return bool(msg.headers)


async def read_state(stream: LimitsStream, ns: Namespace, flow_id: str) -> FlowState:
    """The workflow's state: the last one its workers wrote, whose :attr:`FlowState.seq` is the
    subject's last sequence, which the next write must name."""
    subject = state_subject(ns, flow_id)
    last = await stream.last(subject)
    if last is None:
        return FlowState()
    found: StoredMessage | None = last
    if not written_by_jsworker(last):
        # A message no worker wrote stands last: the state is the last one before it.
        found, seq = None, 1
        while (msg := await stream.next(subject, seq)) is not None and msg.seq < last.seq:
            found = msg if written_by_jsworker(msg) else found
            seq = msg.seq + 1
    state = FlowState.decode(found.seq, found.body) if found is not None and found.body else FlowState()
    state.seq = last.seq
    return state


async def read_result(stream: LimitsStream, ns: Namespace, flow_id: str, index: int) -> StoredMessage | None:
    """The result step ``index`` stored (once, first on its subject), None while there is none."""
    subject, seq = done_subject(ns, flow_id, index), 1
    while (msg := await stream.next(subject, seq)) is not None:
        if written_by_jsworker(msg):
            return msg
        seq = msg.seq + 1
    return None
