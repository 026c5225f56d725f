"""Where trlX's NeMo trainers and rlkit's engine differ on the same YAML, the engine says so
in one line naming the key; a model built from a trlX YAML alone reloads from its own export."""

from pathlib import Path

import pytest
import torch

from rlkit_core.engine import ModelSpec
from rlkit_methods import default_ppo_config
from rlkit_nemo.megatron_config import departures, translate

import nemo_walks
from test_nemo_precision import TRLX_YAMLS, batch, collate, engine_for, nll, shrunk

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "trlx_nemo_configs"


def test_trlx_1_3b_yaml_with_trlx_ppo_settings_names_each_departure():
    config = default_ppo_config().evolve(method=dict(num_rollouts=128), train=dict(total_steps=10000),
                                         model=dict(model_path="lvwerra/gpt2-imdb"))
    lines = departures(translate(str(FIXTURES / "megatron_1.3b.yaml"), cpu=True, quiet=True), config, None)
    assert [line.split(":")[0] for line in lines] == [
        "train.trainer_kwargs.pretrained_model", "megatron_cfg.model.optim", "megatron_cfg.trainer.max_steps",
        "megatron_cfg.model.global_batch_size"]
    assert all("\n" not in line for line in lines)
    # PPO: trlX's NeMoPPOTrainer wrote the config's optimizer, scheduler and length into the YAML
    assert "lr 6e-05, CosineAnnealing to 5e-05 is not used with PPO" in lines[1]
    assert "max_steps: 200 is not used with PPO; the run ends after train.total_steps (10000)" in lines[2]
    assert "256 items per optimizer step from 128 rollouts" in lines[3] and "128 of them are used twice" in lines[3]


def test_agreeing_settings_say_nothing():
    raw = shrunk("megatron_1.3b.yaml")
    raw["model"]["optim"].update(lr=1e-3, sched=None)
    raw["trainer"]["max_steps"] = 10
    config = default_ppo_config().evolve(method=dict(num_rollouts=8), train=dict(total_steps=10),
                                         optimizer=dict(kwargs=dict(lr=1e-3)), model=dict(model_path=""))
    assert departures(translate(raw, cpu=True, quiet=True), config, None) == []
    assert departures(translate(raw, cpu=True, quiet=True), config.evolve(model=dict(model_path="x")), "x") == []


@pytest.mark.slow  # an engine step before the export
@pytest.mark.usefixtures("megatron_cpu")
@pytest.mark.parametrize("name", TRLX_YAMLS)
def test_a_model_built_from_a_trlx_yaml_reloads_from_its_export(name, tmp_path):
    from rlkit_nemo.engine import MegatronEngine

    raw = shrunk(name, megatron_amp_O2=True)
    engine = engine_for(raw, tmp_path / "a")
    items = batch(engine.vocab_size)
    engine.step("tokens", items, collate, nll)
    want = engine.forward("tokens", collate(items))["logprobs"]
    engine.export(tmp_path / "export")
    config = nemo_walks.config("sft", tmp_path / "b")
    config.model.model_path = ""
    again = MegatronEngine(config, megatron_cfg=raw, pretrained_model=str(tmp_path / "export"))
    again.build(ModelSpec(heads="lm"))
    assert torch.equal(again.forward("tokens", collate(items))["logprobs"], want)  # the 2B's layernorm1p too
