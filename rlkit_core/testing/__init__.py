"""Opt-in pytest plugin for rlkit plugin authors.

Enable it in a ``conftest.py`` with ``pytest_plugins = ["rlkit_core.testing"]`` (or
``pytest -p rlkit_core.testing``). It adds fixtures:

* ``rlkit_host``: a fresh plugin host with the installed plugins, used by ``train()`` and the
  CLI for the test, the previous one restored after;
* ``rlkit_bare_host``: the same with no installed plugins loaded (only what the test adds);
* ``register_plugin``: ``register_plugin(obj)`` registers an object or module on the current
  host for one test and unregisters it after;
* ``fake_distribution``: ``fake_distribution(name, entry_points, modules)`` installs a fake
  distribution with entry points for one test.

and reusable fakes (:mod:`rlkit_core.testing.fakes`) and conformance checks
(:mod:`rlkit_core.testing.plugin_checks`).
"""

from __future__ import annotations

import pytest

from rlkit_core.plugins import PluginHost, get_host, set_host
from rlkit_core.testing.plugin_checks import check_imports_no_torch, check_metric_fn, check_plugin, check_reward_fn
from rlkit_core.testing.distributions import forget_modules, write_distribution
from rlkit_core.testing.fakes import (
    FakeMethodConfig,
    FakePlugin,
    FakePromptPipeline,
    FakeTrainer,
    RecordingObserver,
    config_dict,
    constant_reward,
)


def _use_host(host: PluginHost):
    previous = set_host(host)
    try:
        yield host
    finally:
        set_host(previous)


def pytest_configure(config):
    """Ctrl-C does in every test what it does in a terminal. A suite started in the background
    by a non-interactive shell (``cmd &``, nohup, some CI runners) inherits SIGINT ignored:
    Python then installs no KeyboardInterrupt handler and the processes the tests start inherit
    the ignore, so the tests of rlkit's Ctrl-C handling would see nothing. Python's handler is
    put back (a process started from here gets the default again at exec)."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def rlkit_host():
    """A fresh host with the installed plugins, made the process-wide host for this test."""
    yield from _use_host(PluginHost())


@pytest.fixture
def rlkit_bare_host():
    """A fresh host with no installed plugins, made the process-wide host for this test."""
    yield from _use_host(PluginHost(load_entry_points=False))


@pytest.fixture
def register_plugin():
    """``register_plugin(obj, name=None)``: register on the current host for this test only."""
    registered: list[tuple[PluginHost, str]] = []

    def register(plugin, name=None):
        host = get_host()
        registered.append((host, host.register(plugin, name, source="test")))
        return plugin

    yield register
    for host, name in reversed(registered):
        host.unregister(name)


@pytest.fixture
def fake_distribution(tmp_path, monkeypatch):
    """``fake_distribution(name, entry_points, modules, version="1.0.0")`` -> its dist-info path."""
    created: list[str] = []

    def install(name, entry_points, modules, version="1.0.0"):
        root = tmp_path / f"site-{name}"
        path = write_distribution(root, name, entry_points, modules, version=version)
        monkeypatch.syspath_prepend(str(root))
        created.extend(modules)
        return path

    yield install
    forget_modules(*created)


__all__ = [
    "FakeMethodConfig",
    "FakePlugin",
    "FakePromptPipeline",
    "FakeTrainer",
    "RecordingObserver",
    "check_imports_no_torch",
    "check_metric_fn",
    "check_plugin",
    "check_reward_fn",
    "config_dict",
    "constant_reward",
    "fake_distribution",
    "register_plugin",
    "rlkit_bare_host",
    "rlkit_host",
    "write_distribution",
]
