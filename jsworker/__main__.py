"""``python -m jsworker`` is the ``jsworker`` command."""

from .cli import main

main()
