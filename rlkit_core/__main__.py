"""``python -m rlkit_core``: the ``rlkit`` command."""

from rlkit_core.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
