"""DPO, the reward model and logged_pg on the tiny randomwalks set-up of walks_setup (2-block
GPT-2 from a config, the ByT5 byte tokenizer, trlX's graph with seed 1000).

Pairs: two logged walks from the same start letter, the more optimal one chosen. Logged rows:
walks split into [start, rest] with their optimality as reward."""

from __future__ import annotations

import rlkit_core as rlkit
from rlkit_methods.logged.config import default_logged_pg_config
from rlkit_methods.preferences.config import default_dpo_config, default_reward_model_config
from walks_setup import TASK, model_config

DEFAULTS = {"dpo": default_dpo_config, "reward_model": default_reward_model_config, "logged_pg": default_logged_pg_config}
METHODS = {
    "dpo": dict(beta=0.1, gen_kwargs=dict(max_new_tokens=6, do_sample=False)),
    "reward_model": dict(eval_fraction=0.25),
    "logged_pg": dict(gen_kwargs=dict(max_new_tokens=6, do_sample=False)),
}


def walk_pairs(n: int = 32) -> list[dict]:
    """Preference pairs of walks from the same start: the more optimal walk is chosen."""
    by_start: dict[str, list[str]] = {}
    for walk in TASK.walks:
        by_start.setdefault(walk[0], []).append(walk)
    pairs = []
    for start, walks in sorted(by_start.items()):
        for a, b in zip(walks[::2], walks[1::2]):
            oa, ob = TASK.optimality(a), TASK.optimality(b)
            if oa != ob:
                chosen, rejected = (a, b) if oa > ob else (b, a)
                pairs.append({"prompt": start, "chosen": chosen[1:], "rejected": rejected[1:]})
    return pairs[:n]


def logged_rows(n: int = 48) -> tuple[list[list[str]], list[float]]:
    walks = TASK.walks[:n]
    return [[w[0], w[1:]] for w in walks], [TASK.optimality(w) for w in walks]


def config(kind: str, tmp_path, **overrides):
    train = dict(seq_length=12, batch_size=8, epochs=100, total_steps=4, checkpoint_interval=100, eval_interval=100,
                 checkpoint_dir=str(tmp_path / "ckpts"), save_best=False, seed=7)
    c = DEFAULTS[kind]().evolve(
        train=train,
        model=dict(model_path="unused", num_layers_unfrozen=-1),
        tokenizer=dict(tokenizer_path="byt5"),
        optimizer=dict(kwargs=dict(lr=1e-3)),
        scheduler=dict(kwargs=dict(T_max=1000, eta_min=1e-4)),
        method=METHODS[kind],
    )
    c = c.evolve(**overrides) if overrides else c
    c.model.model_path = model_config()
    return c


def run(kind: str, tmp_path, *, config_overrides=None, model_path=None, **train_kwargs):
    """Train ``kind`` on the walks (a fresh tiny GPT-2, or ``model_path``); returns the trainer."""
    c = config(kind, tmp_path, **(config_overrides or {}))
    if model_path is not None:
        c.model.model_path = model_path
    prompts = TASK.eval_prompts[:8]
    if kind == "logged_pg":
        samples, rewards = logged_rows()
        kwargs = dict(samples=samples, rewards=rewards)
    else:
        kwargs = dict(samples=walk_pairs())
    kwargs.update(eval_prompts=prompts, metric_fn=TASK.metric)
    kwargs.update(train_kwargs)
    return rlkit.train(config=c, **kwargs)
