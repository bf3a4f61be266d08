"""Per-partition limits in the worker (``max_running_per_partition``,
``rate_limit_per_partition``): a job starts under its partition's rate and with one of its
leases, waits in its slot or is given back (see :mod:`..limited`), and gives the lease back
once settled; the leases held are renewed meanwhile."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any

from ..._limits.partitions import Lease, Partitions
from ..._limits.spec import partition_of
from ..execution import JobRun
from ..limited import HELD_BACK, Holding, gated, give_back_delay, keep, rate_give_back
from ..outcomes import Outcome, OutcomeKind, Settlement
from ..pipeline import Interceptor, Service

if TYPE_CHECKING:
    from prometheus_client import Counter as Metric

    from ..._enqueue.task import Task

# A job of a partition's concurrency limit given back first waits this long, doubled with each
# delivery up to _LONGEST: how long the partition stays busy is the task's to say, and a
# partition that frees up must not wait long for its next job.
_GIVE_BACK, _LONGEST = 0.5, 5.0


def partition_limited(task: Task[Any, Any]) -> bool:
    """Whether ``task`` has a limit per partition (concurrency or rate)."""
    return task.partition_key is not None and (
        task.max_running_per_partition is not None or task.rate_limit_per_partition is not None
    )


class PartitionLimits(Interceptor):
    """The turns and leases of partitioned tasks."""

    name = "partition-limits"
    # A lease is given back as soon as the job settled: a kept result's ack is not its to wait for.
    after_ack = False

    def __init__(self, holding: Holding, parts: Partitions, rate_held: Metric) -> None:
        self._holding = holding
        self._parts = parts
        self._rate_held = rate_held

    def admit(self, job: JobRun) -> Outcome | Awaitable[Outcome | None] | None:
        """The job's partition, then its turn under the partition's rate and one of its
        leases (a few wait in their slots, the others are given back)."""
        task = job.task
        if task is None or task.partition_key is None or not partition_limited(task):
            return None
        try:
            key = partition_of(task.partition_key, task.signature, job.args, job.kwargs)
        except ValueError as exc:
            return Outcome(OutcomeKind.BAD_INPUT, str(exc), error=exc)
        reason = f"{HELD_BACK}the partition limits of task {task.name}"
        return gated(self._turn(job, task, key, reason), reason)

    async def _turn(self, job: JobRun, task: Task[Any, Any], key: str, reason: str) -> None:
        parts, holding = self._parts, self._holding
        rate, size = task.rate_limit_per_partition, task.max_running_per_partition
        if rate is not None:
            limiter = parts.rate(task.name, key, rate, self._rate_held.labels(f"p-{task.name}").inc)
            if not limiter.in_hand() and not await limiter.take():
                await holding.wait_or_give_back(
                    job, limiter.scope, reason, keep(rate), limiter.acquire, rate_give_back(job, limiter)
                )
        if size is not None:
            lease: Lease | None = await parts.try_lease(task.name, key, size)
            if lease is None:

                def delay() -> float:
                    parts.held(task.name)
                    return give_back_delay(job, _GIVE_BACK, _LONGEST)

                lease = await holding.wait_or_give_back(
                    job,
                    f"l-{task.name}-{key}",
                    reason,
                    keep(None),
                    functools.partial(parts.lease, task.name, key, size),
                    delay,
                )
            job.lease = lease

    async def after_settled(self, job: JobRun, settlement: Settlement) -> None:
        """Give back the partition lease of a job that settled."""
        if job.lease is not None:
            lease, job.lease = job.lease, None
            await self._parts.release(lease)

    def services(self) -> Sequence[Service]:
        """The renewal of the leases this worker holds."""
        return (self._parts.renew_forever,)
