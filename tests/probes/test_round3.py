"""Issue 32's cases and the round-3 probes (``probe_round3.py``) as tests, grouped by class:
every probe must come out clear (refused in one line naming the thing) or handled. Each
failed on the code before issue 32's fixes (the verdicts before and after are in the probes'
report). Probes that start ``rlkit`` in a child process are marked slow."""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_round3 import all_probes  # noqa: E402

_TMP = Path(tempfile.mkdtemp(prefix="rlkit-r3-test-"))
atexit.register(shutil.rmtree, _TMP, True)
SLOW = ("python -m", "rlkit (console script)", "entry-point plugin", "non-daemon thread", "YAML", "size ", "a 40 MB")


def _params():
    for cls, name, probe in all_probes(_TMP):
        marks = [pytest.mark.slow] if any(part in name for part in SLOW) else []
        yield pytest.param(probe, id=f"{cls}: {name}", marks=marks)


@pytest.fixture(autouse=True)
def _stderr_followed_again():
    """probe_bad_inputs.cli points rlkit's error console at the real stderr; the tests after
    these need it to follow sys.stderr (capsys) again."""
    import rlkit_core.cli  # noqa: F401 - its `app` attribute is the Typer app, not the module

    app = sys.modules["rlkit_core.cli.app"]
    previous = app.err_console._file
    yield
    app.err_console._file = previous


@pytest.mark.parametrize("probe", list(_params()))
def test_round3_probe(probe):
    outcome, detail = probe()
    assert outcome in ("clear", "handled"), f"{outcome}: {detail}"
