"""torchrun worker (2 CPU processes, gloo): the NeMo engine's sampling with and without
megatron-core's KV cache (gen_kwargs use_cache) on the same weights, at TP=2 and at PP=2, for
an LM (greedy and seeded sampling) and ILQL's Q-guided heads (beta and a logit mask); and its
no-grad forwards in micro-batches; its default generator's log-probs against the "response"
forward; a generator with its own weights (zeroed) synced from the engine's gathered shards.

Writes OUT/kv_<rank>.json: per layout and model, the sequences of each mode, the lengths of
the token runs the model saw per call, and the positions that reached the output layer.
Usage: torchrun --nproc_per_node 2 kv_cache_worker.py OUT"""

import json
import sys
from pathlib import Path

from conftest import patch_for_cpu

patch_for_cpu()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from rlkit_core.engine import ModelSpec, QGuidance  # noqa: E402
from rlkit_methods.data.padding import pad  # noqa: E402

import nemo_walks  # noqa: E402

LAYOUTS = {"tp2": dict(tp=2), "pp2": dict(pp=2)}
PROMPTS = ["a", "bcd", "ef", "ghij"]  # different lengths: left padding in the batch
NEW_TOKENS = 12


def prompts():
    rows = [torch.tensor(nemo_walks.TOKENIZER(p, add_special_tokens=False).input_ids) for p in PROMPTS]
    ids = pad(rows, 0, "left")
    mask = pad([torch.ones(len(r), dtype=torch.long) for r in rows], 0, "left")
    return ids, mask


def engine_for(method, layout, folder):
    from rlkit_nemo.engine import MegatronEngine

    config = nemo_walks.config(method, folder, layout)
    engine = MegatronEngine(config, **config.train.trainer_kwargs)
    engine.build(ModelSpec(heads="ilql" if method == "ilql" else "lm", options={"two_qs": True}))
    return engine


def record(engine):
    """Hooks noting the token run each model call feeds, and the positions the output layer gets."""
    seen = {"run_rows": [], "run_lengths": [], "output_positions": []}
    module = engine.module

    def note_run(m, args):
        seen["run_rows"].append(int(args[0].shape[0]))
        seen["run_lengths"].append(int(args[0].shape[1]))

    hooks = [module.register_forward_pre_hook(note_run)]
    if module.post_process:
        hooks.append(module.output_layer.register_forward_pre_hook(
            lambda m, args: seen["output_positions"].append(int(args[0].shape[0]))))  # (S, B, H)
    return seen, hooks


def sample(engine, use_cache, guidance, **gen_kwargs):
    ids, mask = prompts()
    seen, hooks = record(engine)
    torch.manual_seed(1234)  # the same stream on the sampling rank for both modes
    try:
        out = engine.generate(ids, mask, guidance=guidance, max_new_tokens=NEW_TOKENS, use_cache=use_cache, **gen_kwargs)
    finally:
        for hook in hooks:
            hook.remove()
    return {"tokens": out.tolist(), **seen}


def micro_batched_forward(engine):
    """A 6-row "tokens" forward (micro-batches of 4: rows 4 + 2) against two 3-row forwards."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, engine.vocab_size, (6, 8), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    batch = {"input_ids": ids, "attention_mask": mask, "labels": ids}
    seen, hooks = record(engine)
    try:
        whole = engine.forward("tokens", batch)["logprobs"]
    finally:
        for hook in hooks:
            hook.remove()
    halves = [engine.forward("tokens", {k: v[rows] for k, v in batch.items()})["logprobs"] for rows in (slice(0, 3), slice(3, 6))]
    return {"rows": seen["run_rows"], "max_diff": float((whole - torch.cat(halves)).abs().max())}


def generator_logprobs(engine):
    """The default generator's log-probs of a seeded sample (top-k and temperature on, which
    the log-probs ignore) and their largest difference from the "response" forward."""
    from rlkit_core.generator import real_response_mask

    ids, mask = prompts()
    torch.manual_seed(99)
    samples = engine.default_generator().generate(ids, mask, max_new_tokens=NEW_TOKENS, do_sample=True, top_k=20,
                                                  temperature=0.7, eos_token_id=None)
    new = samples.ids[:, ids.shape[1]:]
    real = real_response_mask(new, None)
    out = engine.forward("response", {"query_tensors": ids, "response_tensors": new,
                                      "attention_mask": torch.cat([mask, real.long()], dim=1)})
    return {"logprobs": samples.logprobs.tolist(), "max_diff": float((samples.logprobs - out["logprobs"]).abs().max())}


def synced_copy(engine, folder):
    """HFCopyGenerator with every weight zeroed, then synced from ``named_weights`` as a step's
    sync asks (``trainable_only``: every weight trains here, so every one must come, from
    every stage): its log-probs of its own sample against the engine's "response" forward."""
    from rlkit_core.generator import WeightUpdate
    from rlkit_core.testing.generator import HFCopyGenerator

    copy = HFCopyGenerator(engine, folder)
    with torch.no_grad():
        for param in copy.model.parameters():
            param.zero_()
    copy.update_weights(WeightUpdate(version=1, weights=lambda: engine.named_weights(trainable_only=True)))
    ids, mask = prompts()
    torch.manual_seed(5)  # the ranks of one replica must sample the same rows (they hold the same data)
    samples = copy.generate(ids, mask, max_new_tokens=NEW_TOKENS, do_sample=True, eos_token_id=None)
    out = engine.forward("response", {"query_tensors": ids, "response_tensors": samples.ids[:, ids.shape[1]:],
                                      "attention_mask": torch.cat([mask, torch.ones_like(samples.logprobs, dtype=torch.long)], 1)})
    return float((samples.logprobs - out["logprobs"]).abs().max())


def main(out: Path):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    results = {"prompt_width": prompts()[0].shape[1], "new_tokens": NEW_TOKENS}
    for name, layout in LAYOUTS.items():
        for method in ("sft", "ilql"):
            engine = engine_for(method, layout, out / name / method)
            vocab = engine.vocab_size
            guidance = QGuidance(beta=2.0, logit_mask=torch.eye(vocab, dtype=torch.bool)) if method == "ilql" else None
            modes = {"greedy": dict(do_sample=False, eos_token_id=None),
                     "sampled": dict(do_sample=True, top_k=20, temperature=0.7, eos_token_id=None)}
            results[f"{name}/{method}"] = {
                "tp_rank": engine.ps.get_tensor_model_parallel_rank(), "pp_rank": engine.ps.get_pipeline_model_parallel_rank(),
                "micro_batch_size": engine.batch_sizes()[1],
                "forward": micro_batched_forward(engine) if method == "sft" else None,
                "generator": generator_logprobs(engine) if method == "sft" else None,
                "synced_copy": synced_copy(engine, out / name / "copy") if method == "sft" else None,
                **{f"{mode}/{'cache' if cache else 'nocache'}": sample(engine, cache, guidance, **kwargs)
                   for mode, kwargs in modes.items() for cache in (True, False)},
            }
    (out / f"kv_{rank}.json").write_text(json.dumps(results, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
