"""The record a worker keeps of a job in the app's jobs bucket.

The states and the status callers see are the core's (:mod:`jsworker._core.job_status`), imported
from here too.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .._core.job_status import Form as Form
from .._core.job_status import JobError as JobError
from .._core.job_status import JobState as JobState
from .._core.job_status import JobStatus as JobStatus
from .._core.serializers import Serializer
from .._errors import SerializationError


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job's record in the jobs bucket: its state when a worker or a cancel last wrote it,
    and, for a success with results on, the encoded return value.

    ``seq`` is the job message's stream sequence: a waiter holding a receipt takes only the
    record of that very message (a unique job's id comes back for each new run).
    """

    state: JobState
    queue: str
    task: str
    seq: int = 0
    attempts: int = 0
    #: The task's own failures so far (raised, timed out): what ``max_retries`` counts. A run
    #: that ended with no outcome (a crash) is an attempt but no failure.
    failures: int = 0
    #: Runs its task ended with ``Snooze``: neither failures nor crashes.
    snoozes: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    next_attempt_at: float | None = None
    worker: str | None = None
    error: JobError | None = None
    reason: str | None = None
    content_type: str | None = None
    value: bytes | None = field(default=None, repr=False)

    def encode(self) -> bytes:
        """The record as stored: a JSON object, the value inline when it is JSON."""
        doc: dict[str, Any] = {"state": self.state.value, "queue": self.queue, "task": self.task}
        for name in ("seq", "attempts", "started_at", "finished_at", "next_attempt_at", "worker", "reason"):
            value = getattr(self, name)
            if value is not None:
                doc[name] = value
        if self.failures:
            doc["failures"] = self.failures
        if self.snoozes:
            doc["snoozes"] = self.snoozes
        if self.error is not None:
            doc["error"] = {
                "type": self.error.type,
                "message": self.error.message,
                "traceback": self.error.traceback,
            }
        if self.value is not None:
            doc["content_type"] = self.content_type
            if self.content_type == "application/json":
                # Spliced in as it is: readable with `nats kv get`, and not decoded to re-encode.
                head = json.dumps(doc, separators=(",", ":"))
                return f'{head[:-1]},"value":'.encode() + self.value + b"}"
            doc["value_b64"] = base64.b64encode(self.value).decode()
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> JobRecord:
        """Read a stored record; :class:`SerializationError` when it is not one."""
        try:
            doc = json.loads(data)
            state = JobState(doc["state"])
            error = doc.get("error")
            value: bytes | None = None
            if "value" in doc:
                value = json.dumps(doc["value"], separators=(",", ":")).encode()
            elif "value_b64" in doc:
                value = base64.b64decode(doc["value_b64"])
            return cls(
                state=state,
                queue=str(doc.get("queue", "")),
                task=str(doc.get("task", "")),
                seq=int(doc.get("seq", 0)),
                attempts=int(doc.get("attempts", 0)),
                failures=int(doc.get("failures", 0)),
                snoozes=int(doc.get("snoozes", 0)),
                started_at=doc.get("started_at"),
                finished_at=doc.get("finished_at"),
                next_attempt_at=doc.get("next_attempt_at"),
                worker=doc.get("worker"),
                error=None
                if error is None
                else JobError(str(error["type"]), str(error["message"]), error.get("traceback")),
                reason=doc.get("reason"),
                content_type=doc.get("content_type"),
                value=value,
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise SerializationError(f"not a job record: {exc}") from exc

    def result(self, serializer: Serializer) -> Any:
        """The return value, decoded; None when the record holds none."""
        if self.value is None:
            return None
        try:
            return serializer.loads(self.value)
        except Exception as exc:  # a decoder may raise anything on foreign bytes
            raise SerializationError(f"cannot decode the result ({self.content_type}): {exc}") from exc

    def status(self, job_id: str) -> JobStatus:
        """The record as a :class:`JobStatus`."""
        return JobStatus(
            id=job_id,
            state=self.state,
            queue=self.queue or None,
            task=self.task or None,
            attempts=self.attempts or None,
            started_at=_utc(self.started_at),
            finished_at=_utc(self.finished_at),
            next_attempt_at=_utc(self.next_attempt_at),
            worker=self.worker,
            error=self.error,
            reason=self.reason,
            seq=self.seq or None,
            snoozes=self.snoozes or None,
        )


class SuccessRecords:
    """Encodes the records of successes as :meth:`JobRecord.encode` does (the times to the
    microsecond), in a sixth of its time: a worker writes one for every job of a task that
    keeps its results, and for every job when final states are kept."""

    def __init__(self, worker: str, content_type: str) -> None:
        self._worker = f',"worker":{json.dumps(worker)}'.encode()
        self._typed = f',"content_type":{json.dumps(content_type)},'.encode()
        self._inline = content_type == "application/json"
        self._heads: dict[tuple[str, str], bytes] = {}

    def encode(
        self,
        queue: str,
        task: str,
        seq: int,
        attempts: int,
        started_us: int,
        finished_us: int,
        value: bytes | None,
    ) -> bytes:
        """The record of a success of ``task`` from ``queue`` that returned ``value`` (None:
        a success whose value is not kept); the times are Unix times in microseconds."""
        head = self._heads.get((queue, task))
        if head is None:
            head = self._heads[queue, task] = (
                f'{{"state":"succeeded","queue":{json.dumps(queue)},"task":{json.dumps(task)},"seq":'
            ).encode()
        if value is None:
            tail = b"}"
        elif self._inline:
            tail = b'%s"value":%s}' % (self._typed, value)
        else:
            tail = b'%s"value_b64":"%s"}' % (self._typed, base64.b64encode(value))
        # Seconds written as integer parts: a float's repr costs more (bench/README.md,
        # "Hot-path choices").
        return b'%s%d,"attempts":%d,"started_at":%d.%06d,"finished_at":%d.%06d%s%s' % (
            head, seq, attempts, started_us // 1_000_000, started_us % 1_000_000,
            finished_us // 1_000_000, finished_us % 1_000_000, self._worker, tail,
        )  # fmt: skip


def _utc(when: float | None) -> datetime | None:
    return None if when is None else datetime.fromtimestamp(when, UTC)
