"""Tokens/s of the NeMo engine's sampling with megatron-core's KV cache against whole-sequence
recomputation (gen_kwargs use_cache: false), on the same engine, prompts and seed; the two
modes alternate, each run timed once, and the medians are compared. Prints one table.

A GPT-2-shaped model built from a config (random weights: the speed does not depend on them),
the ByT5 byte tokenizer, the tiny Megatron YAML at the TP/PP asked for. Without a GPU it
turns on the plugin's CPU mode (rlkit_nemo.cpu) first.

    OMP_NUM_THREADS=1 python plugins/rlkit_nemo/scripts/kv_cache_bench.py [--new-tokens 64] [--batch 8] ...
    torchrun --nproc_per_node 2 plugins/rlkit_nemo/scripts/kv_cache_bench.py --tp 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from importlib.resources import files
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def engine(args):
    import tempfile

    import yaml
    from transformers import ByT5Tokenizer, GPT2Config

    from rlkit_core.engine import ModelSpec
    from rlkit_methods import default_sft_config
    from rlkit_nemo.engine import MegatronEngine

    megatron = yaml.safe_load((files("rlkit_nemo") / "configs" / "megatron_tiny_cpu.yaml").read_text())
    megatron["model"].update(tensor_model_parallel_size=args.tp, pipeline_model_parallel_size=args.pp,
                             micro_batch_size=args.batch, global_batch_size=args.batch)
    length = args.prompt_length + args.new_tokens
    model = GPT2Config(n_layer=args.layers, n_embd=args.hidden, n_head=args.heads, n_positions=length,
                       vocab_size=len(ByT5Tokenizer()), bos_token_id=1, eos_token_id=1, pad_token_id=0)
    config = default_sft_config().evolve(
        train=dict(seq_length=length, batch_size=args.batch, checkpoint_dir=tempfile.mkdtemp(), seed=args.seed),
        tokenizer=dict(tokenizer_path="byt5"))
    config.model.model_path = model
    built = MegatronEngine(config, megatron_cfg=megatron)
    built.build(ModelSpec(heads="lm"))
    return built


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt-length", type=int, default=16)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        from rlkit_nemo.cpu import enable  # the plugin's CPU mode (gloo)

        enable()
    eng = engine(args)
    g = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(2, eng.vocab_size, (args.batch, args.prompt_length), generator=g)
    mask = torch.ones_like(ids)
    seconds = {True: [], False: []}
    outputs = {}
    eng.generate(ids, mask, max_new_tokens=2, do_sample=False)  # warm-up: first-call allocations
    for _ in range(args.repeats):
        for use_cache in (True, False):
            eng.barrier()
            start = time.perf_counter()
            out = eng.generate(ids, mask, max_new_tokens=args.new_tokens, do_sample=False, eos_token_id=None,
                               use_cache=use_cache)
            seconds[use_cache].append(time.perf_counter() - start)
            outputs[use_cache] = out
    new = args.batch * args.new_tokens
    speed = {k: new / statistics.median(v) for k, v in seconds.items()}
    if eng.is_main_process:
        device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU, {torch.get_num_threads()} thread(s)"
        print(f"model: {args.layers} layers, hidden {args.hidden}, TP={args.tp}, PP={args.pp}; batch {args.batch}, "
              f"prompt {args.prompt_length}, {args.new_tokens} new tokens (greedy); {device}; median of {args.repeats}")
        print(f"{'mode':<28}{'seconds':>10}{'tokens/s':>12}")
        for use_cache, label in ((True, "KV cache (use_cache: true)"), (False, "recompute (use_cache: false)")):
            print(f"{label:<28}{statistics.median(seconds[use_cache]):>10.3f}{speed[use_cache]:>12.1f}")
        print(f"ratio (cache / recompute): {speed[True] / speed[False]:.2f}x; "
              f"same tokens: {torch.equal(outputs[True], outputs[False])}")


if __name__ == "__main__":
    main()
