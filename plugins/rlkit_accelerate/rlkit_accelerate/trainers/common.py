"""Pieces the method trainers share: loading the base model from the config."""

from __future__ import annotations

import math

from rlkit_core.errors import ConfigError
from rlkit_accelerate import assets
from rlkit_accelerate.models.adapters import apply_peft
from rlkit_accelerate.models.loading import load_lm


def load_base_model(config):
    """The LM named by ``model.model_path`` (causal, or encoder-decoder for
    ``model.model_arch_type: seq2seq``): a folder, a model source such as
    ``smollm2-135m``, a transformers config or model, or (in YAML) a mapping with
    ``model_type`` and config fields for a model trained from scratch. ``model_extra_configs``
    go to the loader."""
    path = config.model.model_path
    if isinstance(path, dict):
        from transformers import AutoConfig

        fields = dict(path)
        try:
            path = AutoConfig.for_model(fields.pop("model_type"), **fields)
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"model.model_path: a mapping needs a known model_type and its config fields ({exc})") from None
    arch = config.model.model_arch_type
    model = load_lm(assets.resolve(path), arch, **config.model.model_extra_configs)
    return apply_peft(model, config.model.peft_config, task_type="SEQ_2_SEQ_LM" if arch == "seq2seq" else "CAUSAL_LM")


def is_seq2seq(config) -> bool:
    return config.model.model_arch_type == "seq2seq"


def steps_per_pass(num_items: int, batch_size: int, world_size: int) -> int:
    return math.ceil(num_items / (batch_size * world_size)) if num_items else 0


def prepare_offline_learning(trainer) -> None:
    """One pass over a fixed store per epoch (ILQL, SFT), sharded over the processes."""
    if not getattr(trainer, "store", None):
        raise ConfigError("samples: nothing to train on; give at least one sample")
    train = trainer.config.train
    trainer.n_inner_epochs = 1
    per_pass = steps_per_pass(len(trainer.store), train.batch_size, trainer.accelerator.num_processes)
    trainer.total_steps = min(train.total_steps, train.epochs * per_pass)
