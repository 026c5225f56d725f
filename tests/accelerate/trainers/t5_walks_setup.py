"""The randomwalks set-up of ``walks_setup`` for a tiny T5 built from a config: the start node
is the encoder's prompt and the rest of the walk the decoder's output."""

from __future__ import annotations

from transformers import T5Config

import rlkit_core as rlkit
from walks_setup import TASK, TOKENIZER, config as causal_config, reward_fn

WALKS = [[walk[:1], walk[1:]] for walk in TASK.walks[:64]]


def t5_config(num_layers: int = 2, d_model: int = 32, tie: bool = True) -> T5Config:
    return T5Config(vocab_size=len(TOKENIZER), d_model=d_model, d_kv=8, d_ff=2 * d_model, num_layers=num_layers,
                    num_heads=4, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
                    tie_word_embeddings=tie)


def config(kind: str, tmp_path, **overrides):
    overrides = dict(overrides)
    overrides["model"] = dict(overrides.get("model", {}), model_arch_type="seq2seq")
    c = causal_config(kind, tmp_path, **overrides)
    c.model.model_path = t5_config()
    return c


def run(method: str, tmp_path, *, config_overrides=None, **train_kwargs):
    """Train ``method`` on the walks with a tiny T5; returns the trainer."""
    c = config(method, tmp_path, **(config_overrides or {}))
    prompts = TASK.eval_prompts[:8]
    if method == "ppo":
        kwargs = dict(reward_fn=train_kwargs.pop("reward_fn", reward_fn), prompts=prompts, eval_prompts=prompts)
    elif method == "ilql":
        kwargs = dict(samples=WALKS, rewards=[TASK.optimality("".join(w)) for w in WALKS], eval_prompts=prompts, metric_fn=TASK.metric)
    else:
        kwargs = dict(samples=WALKS, eval_prompts=prompts, metric_fn=TASK.metric)
    kwargs.update(train_kwargs)
    return rlkit.train(config=c, **kwargs)
