"""The run folder is claimed before the model is built (issue 31): a used folder is refused in
seconds, not after minutes of loading, and a config the engine refuses leaves no folder."""

from pathlib import Path

import pytest

from rlkit_core import load_config
from rlkit_core.errors import ConfigError
from rlkit_methods.loop.trainer import RLTrainer

SFT = Path(__file__).resolve().parents[2] / "examples" / "randomwalks" / "sft_randomwalks.yml"


class Engine:
    is_main_process = True
    tokenizer = None
    built: list = []

    def __init__(self, config):
        pass

    def build(self, spec):
        Engine.built.append(spec)

    def broadcast_object(self, obj):
        return obj


class RefusingEngine(Engine):
    def build(self, spec):
        raise ConfigError("model.model_path: the engine refuses it")


class Trainer(RLTrainer):
    def model_spec(self):
        return "spec"


def test_a_used_folder_is_refused_before_the_model_is_built(tmp_path, rlkit_host):
    root = tmp_path / "run"
    (root / "checkpoint_2").mkdir(parents=True)
    (root / "checkpoint_2" / "COMPLETE").write_text("ok\n")
    Engine.built.clear()
    with pytest.raises(ConfigError, match="holds another run's files"):
        Trainer(load_config(SFT, [f"train.checkpoint_dir={root}"]), engine=Engine)
    assert Engine.built == []


def test_a_config_the_engine_refuses_leaves_no_folder(tmp_path, rlkit_host):
    with pytest.raises(ConfigError, match="the engine refuses it"):
        Trainer(load_config(SFT, [f"train.checkpoint_dir={tmp_path / 'new' / 'run'}"]), engine=RefusingEngine)
    assert not (tmp_path / "new").exists()


def test_a_refused_config_leaves_an_existing_folder_as_it_was(tmp_path, rlkit_host):
    root = tmp_path / "mine"
    root.mkdir()
    (root / "notes.txt").write_text("x")
    with pytest.raises(ConfigError):
        Trainer(load_config(SFT, [f"train.checkpoint_dir={root}"]), engine=RefusingEngine)
    assert sorted(p.name for p in root.iterdir()) == ["notes.txt"]  # and no lock left
