"""Where the jobs of each queue are stored: how many job streams (partitions) a queue is spread
over, the layouts its jobs may still be in while that number changes, and the partition of a
job. Producers place jobs by it, workers pull by it and lookups find jobs by it (see
:meth:`jsworker._wire.names.Namespace.partition_stream`)."""

from __future__ import annotations

from collections.abc import Mapping

from .._wire.names import partition_of
from .options import AppOptions, QueueOptions


class QueueLayout:
    """The App's partitions, from its ``partitions`` and ``previous_partitions`` and each
    queue's own (``app.queue(...)``)."""

    options: AppOptions
    queue_options: Mapping[str, QueueOptions]

    def queue_partitions(self, queue: str) -> int:
        """How many job streams the jobs of ``queue`` are spread over."""
        declared = self.queue_options.get(queue)
        if declared is not None:
            if declared.partitions is not None:
                return declared.partitions
            if declared.fair or declared.max_running is not None:
                return 1
        return self.options.partitions

    def queue_layouts(self, queue: str) -> tuple[int, ...]:
        """The partition counts the jobs of ``queue`` may have been placed by: its own, then
        the one before while its partitions change."""
        now, declared = self.queue_partitions(queue), self.queue_options.get(queue)
        if declared is None or (
            declared.partitions is None and not declared.fair and declared.max_running is None
        ):
            before = self.options.previous_partitions  # it follows the app's partitions
        else:
            before = declared.previous_partitions
        return (now,) if before is None or before == now else (now, before)

    def queue_streams(self, queue: str) -> int:
        """How many job streams hold jobs of ``queue``: its partitions, or those before while
        they change, whichever are more (workers pull them all)."""
        return max(self.queue_layouts(queue))

    @property
    def partition_count(self) -> int:
        """The app's job streams: as many as the queue that has the most."""
        default = max(self.options.partitions, self.options.previous_partitions or 1)
        return max([default, *map(self.queue_streams, self.queue_options)])

    def job_partition(self, queue: str, job_id: str) -> int:
        """The partition job ``job_id`` of ``queue`` is stored in (see :func:`partition_of`)."""
        return partition_of(job_id, self.queue_partitions(queue))
