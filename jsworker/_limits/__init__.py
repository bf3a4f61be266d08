"""Limits on how fast and how many jobs start, kept on the server so that they hold across every
worker process and machine: rates and partition keys as declared (``spec``), rate limiters
(``rates``), per-partition leases and rates (``partitions``), fair queues' turns (``fair``).
The worker's part is :mod:`jsworker._runtime.limited` and its interceptors."""
