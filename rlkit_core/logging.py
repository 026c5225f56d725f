"""trlX's ``trlx.utils.logging``: the verbosity of rlkit's loggers and the training progress
display. rlkit's packages log through the standard ``logging`` module under their own names
(``rlkit_core``, ``rlkit_methods``, ...); these functions set their level together."""

from __future__ import annotations

import logging
import os

CRITICAL = logging.CRITICAL
FATAL = logging.FATAL
ERROR = logging.ERROR
WARNING = logging.WARNING
WARN = logging.WARN
INFO = logging.INFO
DEBUG = logging.DEBUG
NOTSET = logging.NOTSET

PACKAGES = ("rlkit_core", "rlkit_methods", "rlkit_accelerate", "rlkit_nemo")
PROGRESS_ENV = "RLKIT_PROGRESS"  # "0": no progress bar or progress lines


def get_logger(name: str | None = None) -> logging.Logger:
    return logging.getLogger(name or "rlkit_core")


def set_verbosity(level: int) -> None:
    """Set the level of every rlkit package's logger."""
    for package in PACKAGES:
        logging.getLogger(package).setLevel(level)


def get_verbosity() -> int:
    return logging.getLogger("rlkit_core").getEffectiveLevel()


def disable_progress_bar() -> None:
    """No progress display in this process (``RLKIT_PROGRESS=0``, seen by subprocesses too)."""
    os.environ[PROGRESS_ENV] = "0"


def enable_progress_bar() -> None:
    os.environ.pop(PROGRESS_ENV, None)


def is_progress_bar_enabled() -> bool:
    return os.environ.get(PROGRESS_ENV, "1") != "0"
