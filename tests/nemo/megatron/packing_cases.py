"""Packed against padded training steps on the NeMo engine (``train.packing``), shared by the
in-process TP=1 test and the TP=2 / PP=2 torchrun worker (packing_parallel_worker.py).

Each case builds a trainer on the tiny randomwalks set-up (nemo_walks.py) with
``train.packing: true``, takes one step's items (rows of different lengths, so the padded
micro-batches hold padding) and runs ``engine.step`` on them twice, packed and padded, with
the optimizer step held back (both see the same weights): the step's stats and every
parameter's gradient, and the shapes the embedding saw."""

from __future__ import annotations

import torch
from transformers import LlamaConfig

import nemo_walks
from rlkit_core.testing.cross_engine import prepared_trainer
from rlkit_nemo.forwards import model_inputs

CASES = ("sft", "ppo", "ilql", "sft_rope")  # sft_rope: a Llama (rotary positions), rows padded on the right
ITEMS, MICRO = 8, 4


def llama_config() -> LlamaConfig:
    return LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=4, vocab_size=len(nemo_walks.TOKENIZER), max_position_embeddings=32,
                       bos_token_id=1, eos_token_id=1, pad_token_id=0)


def build(case: str, tmp_path, tp: int = 1, pp: int = 1):
    method = "sft" if case == "sft_rope" else case
    overrides = dict(train=dict(packing=True, batch_size=ITEMS, total_steps=1, seq_length=30, trainer_kwargs=dict(
        megatron_cfg=nemo_walks.megatron_cfg(tp=tp, pp=pp, global_batch=ITEMS, micro_batch=MICRO))))
    if case == "sft_rope":  # the other padding side (the GPT-2 cases pad on the left)
        overrides["tokenizer"] = dict(tokenizer_path="byt5", padding_side="right")
    c = nemo_walks.config(method, tmp_path, **overrides)
    if case == "sft_rope":
        c.model.model_path = llama_config()
    task = nemo_walks.TASK
    if method == "ppo":
        # prompts of 1 to 3 letters: the queries are left-padded
        data = dict(reward_fn=nemo_walks.reward_fn, prompts=[w[: 1 + i % 3] for i, w in enumerate(task.walks[:8])])
    elif method == "ilql":
        data = dict(samples=task.walks[:64], rewards=[task.optimality(w) for w in task.walks[:64]])
    else:
        data = dict(samples=task.walks[:64])
    return prepared_trainer(config=c, **data)


def packed_and_padded(trainer) -> dict:
    """Both steps on the same items and weights: their stats, the largest gradient difference
    (and the largest gradient), and the (rows, length) of each embedding call."""
    import rlkit_nemo.optim

    engine = trainer.engine
    # short rows with middling ones, then short rows with the longest: each micro-batch holds
    # padding, and collated on their own the two differ in length
    pool = sorted((trainer.store[i] for i in range(min(len(trainer.store), 32))), key=lambda item: length(trainer, item))
    mid = len(pool) // 2
    items = [pool[0], pool[mid], pool[1], pool[mid + 1], pool[-1], pool[2], pool[-2], pool[3]]
    grads, shapes = [], []
    params = [p for p in engine.module.parameters() if p.requires_grad]

    def no_step(optimizer, max_grad_norm):  # keep the weights: both steps see the same ones
        grads.append([p.main_grad.detach().clone() for p in params])
        return False, 0.0

    real = rlkit_nemo.optim.optimizer_step
    rlkit_nemo.optim.optimizer_step = no_step
    embedding = engine.module.embedding if engine.module.pre_process else None
    hook = embedding.register_forward_hook(lambda m, args, kwargs, out: shapes[-1].append(list(kwargs["input_ids"].shape)),
                                           with_kwargs=True) if embedding is not None else None
    stats = {}
    was = engine.packing
    try:
        for packing in (True, False):
            engine.packing = packing
            shapes.append([])
            out = engine.step(trainer.forward_kind, items, trainer.collate, trainer.loss)
            # timings measure the machine, not the step
            stats[packing] = {k: float(v) for k, v in out.items() if not k.startswith(("time/", "cpu/"))}
    finally:
        rlkit_nemo.optim.optimizer_step = real
        engine.packing = was
        if hook is not None:
            hook.remove()
    packed, padded = grads
    mask = model_inputs(trainer.forward_kind, trainer.collate(items[:MICRO]))["attention_mask"]
    return {
        "config_packing": was,
        "packed": stats[True], "padded": stats[False],
        "grad_max_diff": max(float((a - b).abs().max()) for a, b in zip(packed, padded)),
        "grad_max": max(float(b.abs().max()) for b in padded),
        "shapes_packed": shapes[0], "shapes_padded": shapes[1],
        "first_micro_batch_tokens": int(mask.sum()), "first_micro_batch_padding": int((mask == 0).sum()),
    }


def length(trainer, item) -> int:
    return int(model_inputs(trainer.forward_kind, trainer.collate([item]))["attention_mask"].sum())


def run_cases(tmp_path, tp: int = 1, pp: int = 1) -> dict:
    results = {}
    for case in CASES:
        trainer = build(case, tmp_path / case, tp, pp)
        results[case] = packed_and_padded(trainer)
        results[case]["tp_rank"] = trainer.engine.ps.get_tensor_model_parallel_rank()
        results[case]["pp_rank"] = trainer.engine.ps.get_pipeline_model_parallel_rank()
    return results
