"""GRPO and RLOO on the tiny randomwalks set-up of walks_setup (2-block GPT-2 from a config,
the ByT5 byte tokenizer, trlX's graph with seed 1000)."""

from __future__ import annotations

import rlkit_core as rlkit
from rlkit_methods.grpo.config import default_grpo_config, default_rloo_config
from walks_setup import TASK, model_config, reward_fn

DEFAULTS = {"grpo": default_grpo_config, "rloo": default_rloo_config}


def config(kind: str, tmp_path, **overrides):
    train = dict(seq_length=12, batch_size=8, epochs=100, total_steps=4, checkpoint_interval=100, eval_interval=100,
                 checkpoint_dir=str(tmp_path / "ckpts"), save_best=False, seed=7)
    method = dict(num_generations=4, num_rollouts=16, chunk_size=8, beta=0.05, num_iterations=1,
                  gen_kwargs=dict(max_new_tokens=6, top_k=0, top_p=1.0, do_sample=True))
    c = DEFAULTS[kind]().evolve(
        train=train,
        model=dict(model_path="unused", num_layers_unfrozen=-1),
        tokenizer=dict(tokenizer_path="byt5"),
        optimizer=dict(kwargs=dict(lr=1e-3)),
        scheduler=dict(kwargs=dict(T_max=1000, eta_min=1e-4)),
        method=method,
    )
    c = c.evolve(**overrides) if overrides else c
    c.model.model_path = model_config()
    return c


def run(kind: str, tmp_path, *, config_overrides=None, **train_kwargs):
    """Train GRPO or RLOO on the walks' start letters; returns the trainer."""
    c = config(kind, tmp_path, **(config_overrides or {}))
    prompts = TASK.eval_prompts[:8]
    kwargs = dict(reward_fn=reward_fn, prompts=prompts, eval_prompts=prompts)
    kwargs.update(train_kwargs)
    return rlkit.train(config=c, **kwargs)
