"""A module without a jsworker App (``jsworker run`` must refuse it)."""

VALUE = 1
