"""A line every ``RLKIT_HEARTBEAT_S`` seconds (default 30) while a long phase runs: a reward
function that takes minutes on its first call (a model loading inside it) otherwise leaves
the terminal silent, and a silent run looks hung."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from typing import Iterator

log = logging.getLogger(__name__)
ENV = "RLKIT_HEARTBEAT_S"


def interval() -> float:
    try:
        return max(float(os.environ.get(ENV, "30")), 0.05)
    except ValueError:
        return 30.0


@contextlib.contextmanager
def heartbeat(what: str) -> Iterator[None]:
    """While the block runs, log ``<what> is still running (N s)`` every :func:`interval` seconds."""
    done, start, every = threading.Event(), time.time(), interval()

    def beat() -> None:
        while not done.wait(every):
            log.warning("%s is still running (%.0f s)", what, time.time() - start)

    thread = threading.Thread(target=beat, name="rlkit-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
