"""Settings of the example shop: a small Django project whose orders send a receipt as a job."""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ.get("SHOP_SECRET_KEY", "only-for-the-example")
DEBUG = False
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = ["orders"]
ROOT_URLCONF = "shop.urls"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("SHOP_DB", BASE_DIR / "db.sqlite3"),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True

# jsworker: the app's name and its servers, read by shop/jobs.py.
JSWORKER = {
    "name": "shop",
    "servers": os.environ.get("JSWORKER_URL", "nats://127.0.0.1:4222"),
}
