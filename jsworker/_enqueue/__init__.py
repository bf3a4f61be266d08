"""The enqueue side: tasks and their calls (``task``: ``delay``, ``apply``, signatures),
arguments checked and encoded (``arguments``, ``calls``), sent by the producer (``producer``;
by a task's name alone: ``by_name``), and what callers get back (``receipt``: a Job)."""
