"""torchrun worker in the NeMo venv (2 CPU processes, gloo, TP=2): the Megatron engine's
weights, its TP shards gathered to HF names, synced into vLLM running in a process of its own
under the vLLM venv's interpreter (``train.generator_kwargs: {placement: process, python: ...}``).

Each rank writes OUT/sync_<rank>.json: the samples it got, and the largest difference between
vLLM's log-probs and the engine's "response" forward after the first (full) sync, after the
weights changed and were synced, after they changed again with the sync skipped, and after a
sync above a frozen trunk (what it sent: the top block and the final norm).
Usage: torchrun --nproc_per_node 2 megatron_vllm_worker.py OUT VLLM_PYTHON"""

import json
import sys
from pathlib import Path

from conftest import patch_for_cpu  # tests/nemo/megatron's, on PYTHONPATH

patch_for_cpu()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from transformers import GPT2Config  # noqa: E402

from rlkit_core.engine import ModelSpec  # noqa: E402
from rlkit_core.generator import WeightUpdate, real_response_mask  # noqa: E402
from rlkit_methods.data.padding import pad  # noqa: E402

import nemo_walks  # noqa: E402

PROMPTS = ["a", "bcd", "ef", "ghij"]
NEW_TOKENS = 8


def prompts():
    rows = [torch.tensor(nemo_walks.TOKENIZER(p, add_special_tokens=False).input_ids) for p in PROMPTS]
    return pad(rows, 0, "left"), pad([torch.ones(len(r), dtype=torch.long) for r in rows], 0, "left")


def engine_for(folder):
    from rlkit_nemo.engine import MegatronEngine

    config = nemo_walks.config("sft", folder, dict(tp=2))
    # vLLM's CPU attention takes a head dimension of 64 (the walks' tiny model has 8)
    config.model.model_path = GPT2Config(n_layer=2, n_embd=128, n_head=2, n_positions=32,
                                         vocab_size=len(nemo_walks.TOKENIZER), bos_token_id=1, eos_token_id=1,
                                         pad_token_id=0)
    engine = MegatronEngine(config, **config.train.trainer_kwargs)
    engine.build(ModelSpec(heads="lm"))
    return engine


def gap(engine, generator, seed):
    ids, mask = prompts()
    torch.manual_seed(seed)
    samples = generator.generate(ids, mask, max_new_tokens=NEW_TOKENS, do_sample=True, eos_token_id=None)
    new = samples.ids[:, ids.shape[1]:]
    real = real_response_mask(new, None)
    out = engine.forward("response", {"query_tensors": ids, "response_tensors": new,
                                      "attention_mask": torch.cat([mask, real.long()], dim=1)})
    return samples, float(((samples.logprobs - out["logprobs"]).abs() * real).max())


@torch.no_grad()
def change_weights(engine, seed):
    """Every trainable weight moved, as an optimizer step moves them: the same noise on both
    ranks, so a weight replicated over TP stays the same on each."""
    torch.manual_seed(seed)
    for param in engine.module.parameters():
        if param.requires_grad:
            param.add_(torch.randn_like(param) * 0.05)


def update(engine, version, full=False):
    return WeightUpdate(version=version, full=full, weights=lambda: engine.named_weights(trainable_only=not full))


def main(out: Path, python: str):
    from rlkit_vllm.process import ProcessGenerator

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    engine = engine_for(out / "run")
    generator = ProcessGenerator(engine, python=python, kv_cache_mb=16, timeout_s=600)
    generator.update_weights(update(engine, 0, full=True))
    samples, first = gap(engine, generator, seed=5)
    change_weights(engine, seed=1)
    generator.update_weights(update(engine, 1))
    synced_samples, synced = gap(engine, generator, seed=6)
    change_weights(engine, seed=2)  # and no sync
    _, skipped = gap(engine, generator, seed=7)
    generator.update_weights(update(engine, 2))
    for name, param in engine.module.named_parameters():  # a frozen trunk: the top block and final norm train
        param.requires_grad_(".layers.1." in name or "final_layernorm" in name)
    change_weights(engine, seed=3)
    generator.update_weights(update(engine, 3))
    _, frozen_trunk = gap(engine, generator, seed=8)
    sent_above_trunk = generator.last_sync
    result = {"tp_rank": engine.ps.get_tensor_model_parallel_rank(), "replica": generator.replica,
              "samples": samples.ids.tolist(), "synced_samples": synced_samples.ids.tolist(),
              "version": synced_samples.version, "first": first, "synced": synced, "skipped": skipped,
              "frozen_trunk": frozen_trunk, "sent": sent_above_trunk, "hf_names": sorted(name for name, _ in engine.named_weights(trainable_only=False))}
    generator.close()
    result["server_ended"] = generator.proc is None or generator.proc.poll() is not None
    (out / f"sync_{rank}.json").write_text(json.dumps(result, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
