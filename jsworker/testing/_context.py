"""``current_job()`` in a plain unit test, without a worker or a server."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime

from .._enqueue.receipt import JobContext, running_job


@contextmanager
def job_context(
    job_id: str = "test-job",
    *,
    task: str = "test-task",
    queue: str = "default",
    attempt: int = 1,
    max_retries: int = 3,
    headers: Mapping[str, str] | None = None,
    enqueued_at: float | None = None,
    scheduled_for: datetime | None = None,
    seq: int = 1,
    cancelled: bool = False,
) -> Iterator[JobContext]:
    """Make :func:`~jsworker.current_job` return a job with these fields inside the block
    (yielded too), as a worker does around a run; nested blocks restore the outer job."""
    ctx = JobContext(
        id=job_id,
        task=task,
        queue=queue,
        attempt=attempt,
        max_retries=max_retries,
        enqueued_at=enqueued_at,
        headers=dict(headers or {}),
        scheduled_for=scheduled_for,
        seq=seq,
        is_cancelled=lambda: cancelled,
    )
    token = running_job.set(lambda: ctx)
    try:
        yield ctx
    finally:
        running_job.reset(token)
