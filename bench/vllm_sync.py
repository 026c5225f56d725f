"""Weight-sync time of the vLLM generator, in the trainer's process against a process of its own
(placement: process, weights through /dev/shm), interleaved round by round: a full sync (every
weight) and a partial one (the last block and the final norm: a frozen trunk below). The model
is a GPT-2 from a config (random weights; head dimension 64 for vLLM's CPU attention), the
generator's engine a stand-in that exports it and offers its parameters, so only the sync is timed.

    .venv-vllm/bin/python bench/vllm_sync.py [--layers 6] [--width 512] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import ByT5Tokenizer, GPT2Config, GPT2LMHeadModel

from rlkit_core.generator import WeightUpdate


class ExportingModel:
    """What a generator needs from an engine: ``export``, ``tokenizer``, ``process_index``."""

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer, self.process_index = model, tokenizer, 0

    def export(self, folder, **_):
        self.model.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)

    def update(self, version, top_only):
        last = f".h.{self.model.config.n_layer - 1}."

        def weights():
            for name, param in self.model.named_parameters():
                if not top_only or last in name or ".ln_f." in name:
                    yield name, param.detach()

        return WeightUpdate(version=version, weights=weights, full=not top_only)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    tokenizer = ByT5Tokenizer()
    config = GPT2Config(n_layer=args.layers, n_embd=args.width, n_head=args.width // 64, n_positions=128,
                        vocab_size=len(tokenizer), bos_token_id=1, eos_token_id=1, pad_token_id=0)
    engine = ExportingModel(GPT2LMHeadModel(config).eval(), tokenizer)
    from rlkit_vllm.generator import vllm_generator

    generators = {placement: vllm_generator(engine, placement=placement, kv_cache_mb=32,
                                            folder=tempfile.mkdtemp(prefix="rlkit-vllm-sync-"))
                  for placement in ("in_process", "process")}
    times = {(p, kind): [] for p in generators for kind in ("full", "top")}
    version = 0
    for _ in range(args.rounds):
        for placement, generator in generators.items():
            for kind in ("full", "top"):
                with torch.no_grad():
                    for param in engine.model.parameters():
                        param.add_(1e-3)
                version += 1
                start = time.perf_counter()
                generator.update_weights(engine.update(version, top_only=kind == "top"))
                times[(placement, kind)].append(time.perf_counter() - start)
    for generator in generators.values():
        generator.close()
    params = sum(p.numel() for p in engine.model.parameters())
    print(json.dumps({"params_M": round(params / 1e6, 1), "rounds": args.rounds,
                      **{f"{p}/{kind}_s": round(statistics.median(t), 3) for (p, kind), t in times.items()}}))


if __name__ == "__main__":
    main()
