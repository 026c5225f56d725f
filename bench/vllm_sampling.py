"""Sampling tokens/s: the vLLM generator (rlkit-vllm) against the engine's own sampler, both
through rlkit's code (``trainer.sample``) on the same trainer, interleaved round by round, same
threads, in one process. Runs in the vLLM venv:

    .venv-vllm/bin/python bench/vllm_sampling.py [--model smollm2-135m] [--shapes 16x4x16,32x8x64] [--rounds 3]

A shape is prompts x samples per prompt x new tokens (every row samples exactly that many:
``min_new_tokens``). The main job's shape is 16x4x16; the GRPO example's
(examples/sentiments/grpo_smollm2.yml: 16 prompts a phase, groups of 4, 16 tokens) is the same.
Figures from a loaded machine are not targets: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

PROMPTS = ["The movie was", "I watched this film last night and", "Honestly, the acting", "This is the worst",
           "A beautiful story about", "The director clearly", "I did not expect", "What a waste of",
           "My favourite scene is", "The plot twists", "Two hours of", "The soundtrack alone",
           "It starts slowly but", "Nobody in the cinema", "The sequel is", "Every character"]


def build_trainer(model: str, dtype: str, workdir: str):
    """A GRPO trainer on the accelerate engine, as ``rlkit_core.train`` would make it."""
    from rlkit_core.plugins import get_registry
    from rlkit_core.registry import load_target
    from rlkit_methods.grpo.config import default_grpo_config

    extra = {} if dtype == "float32" else {"dtype": dtype}
    config = default_grpo_config().evolve(
        train=dict(seq_length=128, batch_size=8, total_steps=1, checkpoint_dir=workdir, tracker=None, seed=0),
        model=dict(model_path=model, num_layers_unfrozen=-1, model_extra_configs=extra),
        tokenizer=dict(tokenizer_path=model, padding_side="left"),
    )
    cls = load_target(get_registry().get("trainer", "AccelerateGRPOTrainer").target)
    return cls(config=config, reward_fn=lambda samples, **_: [0.0] * len(samples))


def timed(trainer, batch, new_tokens: int) -> float:
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, top_k=0, top_p=1.0, do_sample=True)
    start = time.perf_counter()
    samples = trainer.sample(batch["input_ids"], batch["attention_mask"], **kwargs)
    seconds = time.perf_counter() - start
    assert samples.ids.shape[1] - batch["input_ids"].shape[1] == new_tokens, samples.ids.shape
    return batch["input_ids"].shape[0] * new_tokens / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--shapes", default="16x4x16,32x8x64")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kv-cache-mb", type=int, default=1024)
    parser.add_argument("--out", default=None, help="write the figures as JSON here")
    args = parser.parse_args()

    import torch

    from rlkit_vllm.generator import VLLMGenerator

    torch.manual_seed(0)
    trainer = build_trainer(args.model, args.dtype, tempfile.mkdtemp(prefix="rlkit-vllm-bench-"))
    engine_sampler = trainer.generator
    vllm = VLLMGenerator(trainer.engine, kv_cache_mb=args.kv_cache_mb)
    rows = []
    for shape in args.shapes.split(","):
        prompts, group, new_tokens = (int(x) for x in shape.split("x"))
        texts = [p for p in PROMPTS * (prompts // len(PROMPTS) + 1)][:prompts]
        batch = trainer.tokenizer([t for t in texts for _ in range(group)], return_tensors="pt", padding=True)
        figures = {"engine": [], "vllm": []}
        for side, generator in (("engine", engine_sampler), ("vllm", vllm)):  # warm-up, untimed
            trainer.generator = generator
            timed(trainer, batch, new_tokens)
        for _ in range(args.rounds):
            for side, generator in (("engine", engine_sampler), ("vllm", vllm)):
                trainer.generator = generator
                figures[side].append(timed(trainer, batch, new_tokens))
        engine, ours = statistics.median(figures["engine"]), statistics.median(figures["vllm"])
        rows.append(dict(shape=shape, dtype=args.dtype, engine_tokens_per_s=engine, vllm_tokens_per_s=ours,
                         speedup=ours / engine, rounds=figures, load_average=os.getloadavg()))
        print(f"{shape:>10} {args.dtype}: engine {engine:8.1f} tok/s  vllm {ours:8.1f} tok/s  x{ours / engine:.2f}  "
              f"(median of {args.rounds}; load average {os.getloadavg()[0]:.2f}, threads {torch.get_num_threads()})",
              flush=True)
    vllm.close()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
