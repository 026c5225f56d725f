"""What keeps a plugin's code from disturbing the host: its prints go to stderr, the threads it
starts are recorded so the CLI does not wait for them, and whatever its import raised (exits
and interrupts included) becomes one line for ``rlkit plugins``."""

from __future__ import annotations

import contextlib
import sys
import threading

from rlkit_core.deadline import TIMEOUT_ENV, ImportTimedOut


@contextlib.contextmanager
def plugin_code():
    """Around a plugin's import and registration hooks: what it prints goes to stderr (stdout
    carries ``--json`` and ``config show`` output), and the threads it starts are recorded so
    that the CLI does not wait for them at exit (:func:`plugin_threads`)."""
    before = set(threading.enumerate())
    with contextlib.redirect_stdout(sys.stderr):
        yield
    _PLUGIN_THREADS.extend(t for t in threading.enumerate() if t not in before and not t.daemon)


_PLUGIN_THREADS: list[threading.Thread] = []


def plugin_threads() -> list[threading.Thread]:
    """Non-daemon threads that plugins started and that still run."""
    return [t for t in _PLUGIN_THREADS if t.is_alive()]


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _import_failure(exc: BaseException) -> str:
    """One line for anything a plugin's import raised, exits and interrupts included."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r}) at import; a plugin must raise an error instead of exiting"
    if isinstance(exc, KeyboardInterrupt):
        return "raised KeyboardInterrupt at import"
    if isinstance(exc, ImportTimedOut):
        return f"import {exc} (raise {TIMEOUT_ENV} if it is only slow)"
    return _one_line(exc)
