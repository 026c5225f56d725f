"""Test lanes: a test that starts a real training run must be marked ``slow``.

``pytest -m "not slow"`` is then a fast lane that trains nothing, and a test that forgets
its mark fails in the full suite instead of slowing the fast lane unseen. Enable it with
``-p rlkit_core.testing.lanes`` (rlkit's ``pyproject.toml`` does, for its own tests; a
plugin's suite may do the same) and declare the marker (``markers = ["slow: ..."]``).

A real run, while an unmarked test sets up or runs:

* ``rlkit.train`` reaching the trainer's ``learn`` with a trainer that holds an engine (a
  fake trainer without one, :class:`rlkit_core.testing.FakeTrainer`, is not a real run);
* a subprocess that launches one: ``torchrun`` or ``python -m torch.distributed.run``,
  ``accelerate launch``, ``rlkit run`` or ``python -m rlkit_core run``, or a Python script
  inside a ``tests`` folder (the suites' training workers).

Such a test fails after it ran, naming what it started and the mark to add. Marks of whole
files go in ``pytestmark = pytest.mark.slow``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest

MARK = "slow"


def launched_run(args: Any) -> str | None:
    """What a subprocess's arguments launch, when it is a training run; else None."""
    try:
        argv = shlex.split(args) if isinstance(args, str) else [os.fsdecode(a) for a in args]
    except (TypeError, ValueError):
        return None
    names = [Path(a).name for a in argv]
    if "torchrun" in names or "torch.distributed.run" in argv:
        return "torchrun"
    if "accelerate" in names and "launch" in argv[names.index("accelerate"):]:
        return "accelerate launch"
    for i, arg in enumerate(argv):
        launcher = names[i] == "rlkit" or (arg in ("rlkit_core", "rlkit_core.cli") and i > 0 and argv[i - 1] == "-m")
        if launcher and next((w for w in argv[i + 1:] if not w.startswith("-")), None) == "run":
            return "rlkit run"
    script = next((a for a in argv[1:] if a.endswith(".py")), None)
    if script and names[0].startswith("python") and "tests" in Path(script).parts:
        return f"the script {script}"
    return None


class _Watch:
    """Records the real runs started while it is installed."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def __enter__(self) -> "_Watch":
        import rlkit_core.api as api

        if not callable(getattr(api, "_learn", None)):  # the one place train() calls learn
            raise RuntimeError("rlkit_core.testing.lanes: rlkit_core.api has no _learn; watch the function train() now calls learn through")
        self._api, self._learn, self._popen = api, api._learn, subprocess.Popen.__init__
        watch, learn, popen = self, self._learn, self._popen

        def watched_learn(trainer, *args, **kwargs):
            if getattr(trainer, "engine", None) is not None:
                watch.started.append(f"rlkit.train with {type(trainer).__name__} on {type(trainer.engine).__name__}")
            return learn(trainer, *args, **kwargs)

        def watched_popen(process, args, *rest, **kwargs):
            what = launched_run(args)
            if what:
                watch.started.append(what)
            popen(process, args, *rest, **kwargs)

        api._learn = watched_learn
        subprocess.Popen.__init__ = watched_popen
        return self

    def __exit__(self, *exc) -> None:
        self._api._learn = self._learn
        subprocess.Popen.__init__ = self._popen


def _watched(item) -> Iterator[None]:
    if item.get_closest_marker(MARK) is not None:
        return (yield)
    with _Watch() as watch:
        result = yield
    if watch.started:
        pytest.fail(f"{item.nodeid} starts a real training run ({watch.started[0]}) but is not marked {MARK}: "
                    f"add @pytest.mark.{MARK} (the fast lane, pytest -m 'not {MARK}', leaves it out)", pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _watched(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _watched(item))
