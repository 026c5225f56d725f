"""rlkit's known errors. The CLI prints them as one line each and exits with ``exit_code``."""

from __future__ import annotations


class RlkitError(Exception):
    """A known, user-facing error: its message says what is wrong and how to fix it."""

    exit_code = 1


class ConfigError(RlkitError, ValueError):
    """A config that does not validate. ``errors`` holds one line per problem, each starting
    with the dotted path of the offending key."""

    exit_code = 2

    def __init__(self, errors: list[str] | str):
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("\n".join(self.errors))


class RegistryError(RlkitError, LookupError):
    """A name that no installed plugin provides, or that two plugins provide."""

    exit_code = 2


class PluginError(RlkitError):
    """A plugin that cannot be loaded or misbehaves."""

    exit_code = 1


class RunInterrupted(RlkitError):
    """A run stopped by a signal: SIGINT (Ctrl-C) exits 130, SIGTERM 143 (128 + signal number).

    The loop raises it at a safe point after the first signal (with the checkpoint it wrote,
    if any, in the message); the CLI prints the message as one line and exits ``exit_code``.
    """

    def __init__(self, message: str, *, signal_name: str = "SIGINT", exit_code: int = 130):
        super().__init__(message)
        self.signal_name = signal_name
        self.exit_code = exit_code
