"""The phases of gpu_check.sh: one JSON line per phase on stdout, each phase guarded (an
exception becomes that phase's ``"status": "failed"`` line with its error, and the next
phase runs). ``--cpu`` runs the same logic on the CPU (the plugin's CPU mode, gloo) as a dry
run; ``--phases a,b`` picks phases; ``RLKIT_GPU_CHECK_FAIL=phase`` makes a phase raise
(to check the guard).

Phases: environment; dtype_matrix (GPT-2 LayerNorm, rope + LayerNorm, Llama RMSNorm) x
(bf16 O2, bf16 autocast, fp16 O2), one forward and one step each; distributed_optimizer (Megatron's
distributed optimizer, one data-parallel rank: step, save, fresh load, step, the two second
steps equal); methods (one PPO, ILQL and SFT run of
2 steps in bf16 O2); kv_cache (greedy samples with megatron-core's KV cache equal to
recomputation); te_mask (Transformer Engine's layers on left-padded rows, if TE imports).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "tests" / "nemo" / "megatron")]  # nemo_walks: the tiny randomwalks set-up

PHASES = ("environment", "dtype_matrix", "distributed_optimizer", "methods", "kv_cache", "te_mask")
ARCHS = {
    "gpt2_layernorm": dict(normalization="LayerNorm", activation="gelu", position_embedding_type="learned_absolute"),
    "rope_layernorm": dict(normalization="LayerNorm", activation="gelu", position_embedding_type="rope", rotary_percentage=0.5),
    "llama_rmsnorm": dict(normalization="RMSNorm", activation="swiglu", position_embedding_type="rope", bias=False,
                          share_embeddings_and_output_weights=False),
}
MODES = {"bf16_o2": ("bf16", True), "bf16_autocast": ("bf16", False), "fp16_o2": (16, True)}


def megatron_yaml(arch: str = "gpt2_layernorm", mode: str = "bf16_o2", *, hidden: int = 64, layers: int = 2,
                  distributed_optimizer: bool = False, transformer_engine: bool = False) -> dict:
    precision, o2 = MODES[mode]
    return {
        "trainer": {"devices": 1, "num_nodes": 1, "precision": precision},
        "model": dict(tensor_model_parallel_size=1, pipeline_model_parallel_size=1, micro_batch_size=2, global_batch_size=4,
                      encoder_seq_length=32, max_position_embeddings=32, num_layers=layers, hidden_size=hidden,
                      ffn_hidden_size=2 * hidden, num_attention_heads=4, megatron_amp_O2=o2, native_amp_init_scale=2.0**12,
                      transformer_engine=transformer_engine, **ARCHS[arch],
                      optim={"name": "distributed_fused_adam" if distributed_optimizer else "fused_adam", "lr": 1e-3}),
    }


def engine(folder: Path, raw: dict, heads: str = "lm", **config_overrides):
    """The engine on the YAML's architecture (no pretrained model), built for ``heads``."""
    import nemo_walks
    from rlkit_core.engine import ModelSpec
    from rlkit_nemo.engine import MegatronEngine

    config = nemo_walks.config("sft", folder, **config_overrides)
    config.model.model_path = ""
    eng = MegatronEngine(config, megatron_cfg=raw)
    eng.build(ModelSpec(heads=heads))
    return eng


def token_batch(vocab: int, rows: int = 4, length: int = 12, left_pad: int = 0):
    import torch

    ids = torch.randint(2, vocab, (rows, length), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(rows, length, dtype=torch.long)
    mask[0, :left_pad] = 0
    return [{"input_ids": ids[i], "attention_mask": mask[i], "labels": ids[i].masked_fill(mask[i] == 0, -100)} for i in range(rows)]


def collate(items):
    import torch

    return {k: torch.stack([item[k] for item in items]) for k in items[0]}


def nll(outputs, _batch):
    loss = -(outputs["logprobs"].sum() / outputs["mask"].sum())
    return loss, {"loss": loss.detach()}


def finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")


# --- phases ----------------------------------------------------------------------------------

def environment(out: Path, cpu: bool) -> dict:
    import numpy
    import torch

    info = {"python": sys.version.split()[0], "torch": torch.__version__, "numpy": numpy.__version__,
            "cuda_available": torch.cuda.is_available(), "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}
    import megatron.core

    info["megatron_core"] = getattr(megatron.core, "__version__", "?")
    try:
        import transformer_engine  # noqa: F401

        info["transformer_engine"] = getattr(transformer_engine, "__version__", "importable")
    except Exception as exc:  # ImportError and TE's own load errors alike
        info["transformer_engine"] = f"not importable ({type(exc).__name__})"
    if not cpu and not torch.cuda.is_available():
        raise RuntimeError("CUDA not available (run with --cpu for the dry run)")
    return info


def dtype_matrix(out: Path, cpu: bool) -> dict:
    cells, failed = {}, 0
    for arch in ARCHS:
        for mode in MODES:
            start = time.time()
            try:
                eng = engine(out / f"{arch}_{mode}", megatron_yaml(arch, mode))
                items = token_batch(eng.vocab_size)
                forward = eng.forward("tokens", collate(items))["logprobs"]
                stats = eng.step("tokens", items, collate, nll)
                cell = {"forward_finite": bool(forward.isfinite().all()), "loss": stats["loss"],
                        "grad_norm": stats["policy/grad_norm"], "weights": str(next(eng.module.parameters()).dtype)}
                cell["ok"] = cell["forward_finite"] and finite(cell["loss"]) and finite(cell["grad_norm"])
            except Exception as exc:
                cell = {"ok": False, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"}
            cell["seconds"] = round(time.time() - start, 1)
            failed += not cell["ok"]
            cells[f"{arch}/{mode}"] = cell
    if failed:
        raise PhaseFailed(f"{failed} of {len(cells)} cells failed", cells=cells)
    return {"cells": cells}


def distributed_optimizer(out: Path, cpu: bool) -> dict:
    """Step, save, a fresh engine loads, both step again: the same loss and weights."""
    import torch

    raw = megatron_yaml(distributed_optimizer=True)
    first = engine(out / "a", raw)
    used = first.megatron["optimizer"]["use_distributed_optimizer"]
    items = token_batch(first.vocab_size)
    first.step("tokens", items, collate, nll)
    (out / "ckpt").mkdir(parents=True)
    first.save_state(out / "ckpt")
    again = first.step("tokens", items, collate, nll)["loss"]
    fresh = engine(out / "b", raw)
    fresh.load_state(out / "ckpt")
    loaded = fresh.step("tokens", items, collate, nll)["loss"]
    same = all(torch.equal(a, b) for a, b in zip(first.module.parameters(), fresh.module.parameters()))
    result = {"distributed_optimizer": used, "loss_continued": again, "loss_reloaded": loaded, "weights_equal": same,
              "files": sorted(p.name for p in (out / "ckpt").iterdir())}
    if not used:
        raise PhaseFailed("the YAML's distributed_fused_adam did not select Megatron's distributed optimizer", **result)
    if not (same and again == loaded):
        raise PhaseFailed("the reloaded engine's step differs", **result)
    return result


def methods(out: Path, cpu: bool) -> dict:
    import nemo_walks

    results = {}
    raw = megatron_yaml()
    raw["model"].update(global_batch_size=8, micro_batch_size=4)
    for method in ("ppo", "ilql", "sft"):
        start = time.time()
        config = dict(train=dict(total_steps=2, trainer_kwargs=dict(megatron_cfg=raw)))
        trainer = nemo_walks.run(method, out / method, config_overrides=config)
        losses = [float(r[nemo_walks.LOSS_KEY[method]]) for r in _metrics(out / method)]
        results[method] = {"steps": len(losses), "losses": losses, "finite": all(finite(x) for x in losses),
                           "weights": str(next(trainer.engine.module.parameters()).dtype), "seconds": round(time.time() - start, 1)}
    if not all(r["finite"] and r["steps"] for r in results.values()):
        raise PhaseFailed("a method's loss is not finite", **results)
    return results


def _metrics(folder: Path) -> list[dict]:
    rows = []
    for path in sorted(folder.rglob("metrics.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if any(k.startswith(("losses/", "loss")) for k in r)]


def kv_cache(out: Path, cpu: bool) -> dict:
    import torch

    eng = engine(out, megatron_yaml("llama_rmsnorm"))
    prompts = torch.randint(2, eng.vocab_size, (4, 8), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(prompts)
    mask[0, :3] = 0  # left padding
    runs = {cache: eng.generate(prompts, mask, max_new_tokens=16, do_sample=False, eos_token_id=None, use_cache=cache)
            for cache in (True, False)}
    equal = torch.equal(runs[True], runs[False])
    if not equal:
        raise PhaseFailed("cached samples differ from recomputed ones", tokens=runs[True].tolist(), recomputed=runs[False].tolist())
    return {"equal": equal, "shape": list(runs[True].shape)}


def te_mask(out: Path, cpu: bool) -> dict:
    """Transformer Engine's layers on a left-padded row: its logits at the real tokens should
    equal the same row unpadded (they do not when TE ignores the padding mask)."""
    try:
        import transformer_engine  # noqa: F401
    except Exception as exc:
        return {"status": "skipped", "reason": f"transformer_engine not importable ({type(exc).__name__})"}
    import torch

    eng = engine(out, megatron_yaml("llama_rmsnorm", transformer_engine=True))
    ids = torch.randint(2, eng.vocab_size, (1, 8), generator=torch.Generator().manual_seed(2))
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], 1)
    pmask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 8, dtype=torch.long)], 1)
    plain = eng.forward("tokens", {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids})["logprobs"]
    left = eng.forward("tokens", {"input_ids": padded, "attention_mask": pmask, "labels": padded})["logprobs"][:, 3:]
    diff = float((plain - left).abs().max())
    return {"max_logprob_diff_left_padding": diff, "mask_honoured": diff < 0.05}


class PhaseFailed(Exception):
    def __init__(self, message: str, **details):
        super().__init__(message)
        self.details = details


def main(argv: list[str]) -> int:
    cpu = "--cpu" in argv
    picked = next((a.split("=", 1)[1] for a in argv if a.startswith("--phases=")), ",".join(PHASES)).split(",")
    unknown = sorted(set(picked) - set(PHASES))
    if unknown:
        print(f"gpu_check.py: unknown phase {unknown[0]}; phases: {', '.join(PHASES)}", file=sys.stderr)
        return 2
    out = Path(next((a for a in argv if not a.startswith("--")), tempfile.mkdtemp(prefix="gpu_check_")))
    out.mkdir(parents=True, exist_ok=True)
    if cpu:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    inject = os.environ.get("RLKIT_GPU_CHECK_FAIL", "")
    failures = 0
    for name in PHASES:
        if name not in picked:
            continue
        start = time.time()
        line = {"phase": name, "device": "cpu" if cpu else "cuda"}
        try:
            if name == inject:
                raise RuntimeError(f"injected failure (RLKIT_GPU_CHECK_FAIL={inject})")
            result = globals()[name](out / name, cpu)
            line.update({"status": "ok", **result} if "status" not in result else result)
        except Exception as exc:
            failures += 1
            line.update(status="failed", error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}",
                        **getattr(exc, "details", {}))
            tb = traceback.format_exc()
            (out / f"{name}.traceback.txt").write_text(tb)
        line["seconds"] = round(time.time() - start, 1)
        print(json.dumps(line, default=str), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
