"""``python -m jsworker`` is the ``jsworker`` command."""

from ._cli import main

if __name__ == "__main__":
    main()
