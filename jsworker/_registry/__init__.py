"""The worker registry: each live worker process's entry in a KV bucket (``entries``), read by
``jsworker workers``, the Admin API and the queue status; a worker writes its own (see
:mod:`jsworker._runtime.announcer`)."""
