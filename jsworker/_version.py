"""jsworker's release: a module of its own, importing nothing, so any module can read it
without importing the package's facade (``jsworker/__init__.py``), which imports them all."""

__version__ = "0.1.0"
