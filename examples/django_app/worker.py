"""What ``jsworker run worker`` imports: Django set up first (the tasks use the ORM), then the
``tasks`` module of every installed app, so each registers its tasks on the project's app."""

import os
from importlib import import_module
from importlib.util import find_spec

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
django.setup()

from django.apps import apps  # noqa: E402
from shop.jobs import app  # noqa: E402

for config in apps.get_app_configs():
    if find_spec(f"{config.name}.tasks") is not None:
        import_module(f"{config.name}.tasks")

__all__ = ["app"]
