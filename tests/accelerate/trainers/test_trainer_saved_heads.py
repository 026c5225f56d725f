"""Training from an rlkit export starts from the heads saved beside its weights (trlX's
``from_pretrained`` loads them too), and heads saved with other options are one clear error."""

import pytest
import torch

import rlkit_core as rlkit
from rlkit_core.errors import ConfigError

from walks_setup import run

pytestmark = pytest.mark.slow  # trains real runs (rlkit_core.testing.lanes)


class HeadsAtStart:
    def __init__(self, name):
        self.name, self.state = name, None

    @rlkit.hookimpl
    def rlkit_train_start(self, trainer, config, is_main_process):
        heads = getattr(trainer.unwrapped_model, self.name)
        self.state = {k: v.detach().clone() for k, v in heads.state_dict().items()}


@pytest.mark.parametrize("method, heads", [("ilql", "ilql_heads"), ("ppo", "v_head")])
def test_training_from_an_export_starts_from_its_saved_heads(method, heads, tmp_path):
    first = run(method, tmp_path / "first", config_overrides=dict(train=dict(total_steps=2)))
    first.save_pretrained(tmp_path / "export")
    saved = getattr(first.unwrapped_model, heads).state_dict()
    start = HeadsAtStart(heads)
    run(method, tmp_path / "second", model_path=str(tmp_path / "export"), plugins=[start],
        config_overrides=dict(train=dict(total_steps=1, seed=8)))
    assert saved.keys() == start.state.keys()
    assert all(torch.equal(saved[k], start.state[k]) for k in saved)


def test_heads_saved_with_other_options_are_refused_naming_the_file(tmp_path):
    first = run("ilql", tmp_path / "first", config_overrides=dict(train=dict(total_steps=1)))
    first.save_pretrained(tmp_path / "export")
    with pytest.raises(ConfigError) as raised:
        run("ilql", tmp_path / "second", model_path=str(tmp_path / "export"),
            config_overrides=dict(method=dict(q_heads="embedding"), train=dict(total_steps=1)))
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("model.model_path: ") and "ilql_heads.safetensors" in message
    assert "fresh heads" in message


def test_a_cut_heads_file_is_named_in_one_line(tmp_path):
    first = run("ppo", tmp_path / "first", config_overrides=dict(train=dict(total_steps=1)))
    first.save_pretrained(tmp_path / "export")
    heads = tmp_path / "export" / "value_head.safetensors"
    heads.write_bytes(heads.read_bytes()[:40])
    with pytest.raises(ConfigError) as raised:
        run("ppo", tmp_path / "second", model_path=str(tmp_path / "export"), config_overrides=dict(train=dict(total_steps=1)))
    message = str(raised.value)
    assert "\n" not in message and str(heads) in message and "not a readable safetensors file" in message
