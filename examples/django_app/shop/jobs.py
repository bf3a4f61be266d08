"""The project's jsworker app, configured from ``settings.JSWORKER``.

Tasks live in each Django app's ``tasks`` module (``orders/tasks.py``) and register on this app;
``worker.py`` at the project's root sets Django up and imports them for ``jsworker run worker``.
"""

from django.conf import settings

from jsworker import App

app = App(settings.JSWORKER["name"], settings.JSWORKER["servers"])
