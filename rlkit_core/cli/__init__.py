"""The ``rlkit`` command line: thin commands over the Python API."""

from rlkit_core.cli.app import app, main

__all__ = ["app", "main"]
