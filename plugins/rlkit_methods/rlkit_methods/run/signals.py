"""Stop a run cleanly on SIGINT (Ctrl-C) or SIGTERM.

While :func:`stop_on_signals` is open, the first SIGINT or SIGTERM only sets a flag; the loop
checks ``stop.requested`` at its safe points (after an optimizer step, between phases),
writes a checkpoint and raises :class:`rlkit_core.errors.RunInterrupted`, which the CLI
prints as one line and turns into exit code 130 (SIGINT) or 143 (SIGTERM). A second signal
interrupts at once: the handlers from before are put back and the signal is raised again,
so it does what it would have done without us (``KeyboardInterrupt``; the CLI's SIGTERM
handler, or the default: the process ends).

Signal handlers can only be set on the main thread; elsewhere (a run started from a worker
thread) the context does nothing and signals keep their usual effect.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

from rlkit_core.errors import RunInterrupted

EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}  # 128 + the signal number, as shells report it


class StopRequest:
    """The flag the loop checks: set by the first signal."""

    def __init__(self) -> None:
        self.signal_name: str | None = None

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.signal_name or "SIGINT", 130)

    def error(self, step: int, checkpoint: object = None) -> RunInterrupted:
        """The error the loop raises after stopping at ``step`` (and writing ``checkpoint``)."""
        saved = f"checkpoint written to {checkpoint}; resume with train.resume_from_checkpoint={checkpoint}" if checkpoint \
            else "no checkpoint written"
        return RunInterrupted(f"interrupted by {self.signal_name} at step {step}; {saved}",
                              signal_name=self.signal_name or "SIGINT", exit_code=self.exit_code)

    def raise_if_requested(self, step: int, checkpoint: object = None) -> None:
        if self.requested:
            raise self.error(step, checkpoint)


@contextmanager
def stop_on_signals(enabled: bool = True) -> Iterator[StopRequest]:
    """Turn the first SIGINT/SIGTERM into ``stop.requested``; restore the handlers on exit."""
    stop = StopRequest()
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def on_signal(signum, frame):
        if stop.requested:  # the second one: as if we were not there
            restore()
            signal.raise_signal(signum)
            return
        stop.signal_name = signal.Signals(signum).name

    def restore():
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)

    previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        restore()
