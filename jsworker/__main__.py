"""``python -m jsworker`` is the ``jsworker`` command."""

from .cli import main

if __name__ == "__main__":
    main()
