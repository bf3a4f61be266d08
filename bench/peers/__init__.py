"""The same workloads through other task queues, run from a separate virtualenv."""
