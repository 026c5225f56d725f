"""A tiny randomwalks set-up for trainer tests: a 2-block GPT-2 from a config, the ByT5
byte tokenizer (no files), trlX's graph with seed 1000."""

from __future__ import annotations

from transformers import ByT5Tokenizer, GPT2Config

import rlkit_core as rlkit
from rlkit_methods import default_ilql_config, default_ppo_config, default_sft_config
from rlkit_methods.rewards.randomwalks import random_walks

TASK = random_walks(seed=1000)
TOKENIZER = ByT5Tokenizer()


def model_config(n_layer: int = 2, n_embd: int = 32) -> GPT2Config:
    return GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=4, n_positions=32, vocab_size=len(TOKENIZER),
                      bos_token_id=1, eos_token_id=1, pad_token_id=0)


def config(kind: str, tmp_path, model_path=None, **overrides):
    base = {"ppo": default_ppo_config, "ilql": default_ilql_config, "sft": default_sft_config}[kind]()
    train = dict(seq_length=12, batch_size=8, epochs=100, total_steps=4, checkpoint_interval=100, eval_interval=100,
                 checkpoint_dir=str(tmp_path / "ckpts"), save_best=False, seed=7)
    methods = {
        "ppo": dict(num_rollouts=16, chunk_size=8, ppo_epochs=2, init_kl_coef=0.05,
                    gen_kwargs=dict(max_new_tokens=6, top_k=0, top_p=1.0, do_sample=True)),
        "ilql": dict(alpha=0.1, tau=0.8, steps_for_target_q_sync=2,
                     gen_kwargs=dict(max_new_tokens=6, top_k=1, beta=[0, 1], temperature=1.0)),
        "sft": dict(gen_kwargs=dict(max_new_tokens=6, do_sample=False)),
    }
    c = base.evolve(
        train=train,
        model=dict(model_path="unused", num_layers_unfrozen=-1),
        tokenizer=dict(tokenizer_path="byt5"),
        optimizer=dict(kwargs=dict(lr=1e-3)),
        scheduler=dict(kwargs=dict(T_max=1000, eta_min=1e-4)),
        method=methods[kind],
    )
    c = c.evolve(**overrides) if overrides else c
    c.model.model_path = model_config() if model_path is None else model_path
    return c


def reward_fn(samples, **kwargs):
    return TASK.metric(samples)["optimality"]


def run(method: str, tmp_path, *, config_overrides=None, model_path=None, **train_kwargs):
    """Train ``method`` on the walks (from ``model_path``, default a fresh tiny GPT-2); returns the trainer."""
    c = config(method, tmp_path, model_path, **(config_overrides or {}))
    prompts = TASK.eval_prompts[:8]
    if method == "ppo":
        kwargs = dict(reward_fn=train_kwargs.pop("reward_fn", reward_fn), prompts=prompts, eval_prompts=prompts)
    elif method == "ilql":
        walks = TASK.walks[:64]
        kwargs = dict(samples=walks, rewards=[TASK.optimality(w) for w in walks], eval_prompts=prompts, metric_fn=TASK.metric)
    else:
        kwargs = dict(samples=TASK.walks[:64], eval_prompts=prompts, metric_fn=TASK.metric)
    kwargs.update(train_kwargs)
    return rlkit.train(config=c, **kwargs)
