"""Delayed and periodic jobs, kept and fired by the server (JetStream message schedules).

:class:`jsworker.Schedules` (:mod:`.admin`) operates an app's periodic schedules; declare them with
:meth:`App.schedule <jsworker.App.schedule>` or ``@app.task(cron=...)``, delay a job with
``task.apply(..., countdown=...)`` or ``eta=...``, and cancel it with
:meth:`App.cancel <jsworker.App.cancel>`.
"""
