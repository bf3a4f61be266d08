"""The web dashboard of a jsworker app (docs/dashboard.md).

::

    from jsworker.ui import create_app

    dashboard = create_app(app, auth="admin:secret")  # an ASGI app: uvicorn, or Mount it

Needs the ``ui`` extra: ``pip install 'jsworker[ui]'``. ``jsworker ui MODULE`` serves it.
"""

try:
    from ._app import create_app
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError(f"the dashboard needs the ui extra: pip install 'jsworker[ui]' ({exc})") from exc

__all__ = ["create_app"]
