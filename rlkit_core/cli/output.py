"""What ``rlkit run`` shows besides progress: rlkit's own log records (a model converted on
first use, what a store holds, ...) as plain lines on stderr. Third-party loggers keep their
own settings; a program that configured logging itself keeps its handlers."""

from __future__ import annotations

import logging
import sys


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (pytest's capture swaps it)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def show_rlkit_logs(level: int = logging.INFO) -> None:
    """INFO and above of the rlkit packages' loggers on stderr, once per process."""
    from rlkit_core.logging import PACKAGES

    for name in PACKAGES:
        logger = logging.getLogger(name)
        if logger.handlers:  # configured already (by us, or by the program)
            continue
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.propagate = False  # once, not again through a root handler
        if logger.level == logging.NOTSET:
            logger.setLevel(level)
