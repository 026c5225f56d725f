"""megatron_trainer / megatron_optimizer build NeMo 2's objects from the shipped Megatron YAMLs."""

from importlib.resources import files

import pytest
import torch

CONFIGS = files("rlkit_nemo") / "configs"


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # NeMoLogger makes the exp_manager log dir


def test_tiny_cpu_yaml_gives_a_megatron_trainer():
    import nemo.lightning as nl

    from rlkit_nemo import megatron_trainer

    trainer = megatron_trainer(str(CONFIGS / "megatron_tiny_cpu.yaml"), cpu=True)
    assert isinstance(trainer, nl.Trainer) and isinstance(trainer.strategy, nl.MegatronStrategy)
    assert trainer.strategy.tensor_model_parallel_size == 2 and trainer.strategy.pipeline_model_parallel_size == 1
    assert not isinstance(trainer.precision_plugin, nl.MegatronMixedPrecision)  # precision 32
    assert trainer.max_steps == -1 and trainer.num_devices == 2  # none: train.total_steps ends an engine run


def test_20b_yaml_gives_tp8_pp2_bf16_o2():
    import nemo.lightning as nl

    from rlkit_nemo import megatron_trainer
    from rlkit_nemo.lightning import megatron_optimizer

    path = str(CONFIGS / "megatron_20b.yaml")
    trainer = megatron_trainer(path, cpu=True, max_steps=3)
    s = trainer.strategy
    assert (s.tensor_model_parallel_size, s.pipeline_model_parallel_size, s.sequence_parallel) == (8, 2, False)
    plugin = trainer.precision_plugin
    assert isinstance(plugin, nl.MegatronMixedPrecision)
    assert plugin.dtype_config.params_dtype == torch.bfloat16 and plugin.dtype_config.autocast_enabled is False
    assert trainer.max_steps == 3 and trainer.num_nodes == 4
    opt = megatron_optimizer(path)
    assert opt.config.bf16 is True and opt.config.lr == 1.0e-5 and opt.config.clip_grad == 1.0
    assert opt.config.use_distributed_optimizer is True
    assert type(opt.lr_scheduler).__name__ == "CosineAnnealingScheduler" and opt.lr_scheduler.min_lr == 1.0e-6


def test_activation_checkpointing_reaches_the_transformer_config():
    import yaml

    from rlkit_nemo.megatron_config import translate
    from rlkit_nemo.models.from_yaml import transformer_config

    cfg = yaml.safe_load((CONFIGS / "megatron_20b.yaml").read_text())
    model = translate(cfg)["model"]
    model.update(tensor_model_parallel_size=1, pipeline_model_parallel_size=1, sequence_parallel=False)
    config = transformer_config(model, cpu=True)
    assert (config.recompute_granularity, config.recompute_method, config.recompute_num_layers) == ("full", "uniform", 1)
    assert config.params_dtype == torch.bfloat16 and config.num_attention_heads == 64
