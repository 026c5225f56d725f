"""``train.tracker``: TensorBoard writes into ``<logging_dir>/<project_name>``, wandb gets trlX's
tracker fields (run name, entity, group, tags) and the run's folder, and only the main
process tracks (issue 17, trackers). The trackers' packages are replaced by recording fakes:
the tests need neither tensorboard nor wandb (nor an account)."""

import importlib.util
import sys
import types
from pathlib import Path

import pytest

from rlkit_core import load_config
from rlkit_methods.run import tracking
from rlkit_methods.run.tracking import Tracker

ROOT = Path(__file__).resolve().parents[2]
SFT = ROOT / "examples" / "randomwalks" / "sft_randomwalks.yml"


@pytest.fixture
def installed(monkeypatch):
    """Make ``name`` look installed to the tracker check."""
    real = importlib.util.find_spec

    def install(name):
        monkeypatch.setattr(tracking.importlib.util, "find_spec",
                            lambda n, *a: types.SimpleNamespace(name=n) if n == name else real(n, *a))
    return install


@pytest.fixture
def fake_tensorboard(monkeypatch, installed):
    installed("tensorboard")
    writers = []

    class SummaryWriter:
        def __init__(self, log_dir):
            self.log_dir, self.scalars, self.texts, self.closed = log_dir, [], [], False
            writers.append(self)

        def add_scalar(self, key, value, step):
            self.scalars.append((key, value, step))

        def add_text(self, key, text):
            self.texts.append((key, text))

        def close(self):
            self.closed = True

    module = types.ModuleType("torch.utils.tensorboard")
    module.SummaryWriter = SummaryWriter
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", module)
    return writers


@pytest.fixture
def fake_wandb(monkeypatch, installed):
    installed("wandb")
    runs = []

    class Run:
        def __init__(self, **kwargs):
            self.kwargs, self.logged, self.finished = kwargs, [], False

        def log(self, numbers, step):
            self.logged.append((numbers, step))

        def finish(self):
            self.finished = True

    module = types.ModuleType("wandb")
    module.init = lambda **kwargs: runs.append(Run(**kwargs)) or runs[-1]
    monkeypatch.setitem(sys.modules, "wandb", module)
    return runs


def config(**train):
    return load_config(SFT).evolve(train=train)


def test_tensorboard_writes_into_the_logging_dir(fake_tensorboard, tmp_path):
    tracker = Tracker(config(tracker="tensorboard", project_name="walks"), tmp_path / "run" / "logs", enabled=True)
    tracker.log({"loss": 0.5, "reward/mean": 1, "flag": True, "text": "x", "bad": float("nan")}, step=3)
    tracker.finish()
    (writer,) = fake_tensorboard
    assert Path(writer.log_dir) == tmp_path / "run" / "logs" / "walks"
    assert writer.scalars == [("loss", 0.5, 3), ("reward/mean", 1.0, 3)]  # numbers only, finite only
    assert writer.texts[0][0] == "config" and "'train.project_name': 'walks'" in writer.texts[0][1]
    assert writer.closed


def test_wandb_gets_trlxs_tracker_fields_and_the_run_folder(fake_wandb, tmp_path):
    train = dict(tracker="wandb", project_name="walks", run_name="sft-1", entity_name="lab", group_name="sweep", tags=["a", "b"])
    tracker = Tracker(config(**train), tmp_path / "logs", enabled=True)
    tracker.log({"loss": 0.5}, step=2)
    tracker.finish()
    (run,) = fake_wandb
    assert run.kwargs["project"] == "walks" and run.kwargs["dir"] == str(tmp_path / "logs")
    assert {k: run.kwargs[k] for k in ("name", "entity", "group", "tags")} == {
        "name": "sft-1", "entity": "lab", "group": "sweep", "tags": ["a", "b"]}
    assert run.kwargs["config"]["train.run_name"] == "sft-1"
    assert run.logged == [({"loss": 0.5}, 2)] and run.finished


def test_wandb_fields_left_unset_are_not_passed(fake_wandb, tmp_path):
    Tracker(config(tracker="wandb"), tmp_path, enabled=True)
    (run,) = fake_wandb
    assert not {"name", "entity", "group", "tags"} & run.kwargs.keys()


def test_only_the_main_process_tracks(fake_tensorboard, tmp_path):
    tracker = Tracker(config(tracker="tensorboard"), tmp_path, enabled=False)
    tracker.log({"loss": 0.5}, step=1)
    tracker.finish()
    assert fake_tensorboard == []


def test_a_tracker_that_is_not_installed_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(tracking.importlib.util, "find_spec", lambda n, *a: None)
    with pytest.raises(Exception, match=r"^train.tracker: wandb is not installed; pip install wandb, or set train.tracker: null$"):
        Tracker(config(tracker="wandb"), tmp_path, enabled=True)
