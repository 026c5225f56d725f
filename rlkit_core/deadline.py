"""Run a plugin's import with a deadline, and tell a plugin's own exit or Ctrl-C from the user's.

What CPython allows: a running import cannot be killed from outside. Two ways are used:

* On the main thread of a POSIX process (the CLI, and ``train()`` called from a script), a
  ``SIGALRM`` timer raises :class:`ImportTimedOut` inside the import. The import unwinds as
  after any error (its module leaves ``sys.modules``) and nothing keeps running. Its limit:
  Python delivers the signal only between bytecodes, so an import stuck inside one C call
  that holds the GIL and ignores signals cannot be interrupted; and a plugin catching
  ``BaseException`` can swallow it. While the timer runs, a real Ctrl-C raises
  :class:`UserInterrupt`, which the host re-raises rather than blame the plugin.
* Elsewhere (another thread, Windows, or when a ``SIGALRM`` timer is already armed, e.g. by
  pytest-timeout), the import runs in a daemon thread and is abandoned at the deadline: the
  caller goes on, but the thread may still run in the background (and holds that module's
  import lock, so importing the same module again would wait for it).

``RLKIT_PLUGIN_IMPORT_TIMEOUT`` sets the deadline in seconds (default 60; 0 turns it off).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any, Callable

from rlkit_core.errors import PluginError

TIMEOUT_ENV = "RLKIT_PLUGIN_IMPORT_TIMEOUT"
DEFAULT_TIMEOUT = 60.0


class ImportTimedOut(BaseException):
    """Raised inside a plugin import that ran past its deadline (a BaseException, so that a
    plugin's ``except Exception`` does not swallow it)."""


class UserInterrupt(KeyboardInterrupt):
    """A real Ctrl-C that arrived while a plugin was importing (not the plugin's own raise)."""


def import_timeout() -> float:
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise PluginError(f"{TIMEOUT_ENV}={raw!r}: expected seconds >= 0 (0 turns the limit off)")
    return value


def call_with_deadline(fn: Callable[[], Any], seconds: float) -> Any:
    """``fn()``, or :class:`ImportTimedOut` after ``seconds`` (0: no limit)."""
    if seconds <= 0:
        return fn()
    main = threading.current_thread() is threading.main_thread()
    if main and hasattr(signal, "setitimer") and signal.getitimer(signal.ITIMER_REAL)[0] == 0:
        return _with_alarm(fn, seconds)
    return _with_thread(fn, seconds)


def _with_alarm(fn: Callable[[], Any], seconds: float) -> Any:
    def on_alarm(signum, frame):
        raise ImportTimedOut(f"did not finish within {seconds:g}s")

    def on_sigint(signum, frame):
        raise UserInterrupt()

    previous_alarm = signal.signal(signal.SIGALRM, on_alarm)
    previous_int = signal.signal(signal.SIGINT, on_sigint)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return fn()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:  # None: a handler set outside Python, left as it is
        for signum, previous in ((signal.SIGALRM, previous_alarm), (signal.SIGINT, previous_int)):
            if previous is not None:
                signal.signal(signum, previous)


def _with_thread(fn: Callable[[], Any], seconds: float) -> Any:
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # handed to the caller, whatever it is
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="rlkit-plugin-import", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise ImportTimedOut(f"did not finish within {seconds:g}s (abandoned; it may still run in the background)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")
