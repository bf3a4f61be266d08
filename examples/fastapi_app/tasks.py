"""The tasks of the FastAPI example: the web app enqueues them, ``jsworker run tasks`` runs them.

The app reads its server from ``$JSWORKER_URL`` (``nats://127.0.0.1:4222`` when unset), in the
web process and in the worker alike.
"""

from __future__ import annotations

from jsworker import App

app = App("thumbs")


@app.task(store_result=True)
async def thumbnail(path: str, width: int) -> str:
    """Pretends to resize an image; its result is kept, so the web app can wait for it."""
    return f"{path.rsplit('.', 1)[0]}-{width}w.png"
