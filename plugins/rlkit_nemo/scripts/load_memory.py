"""Peak memory per rank while the NeMo engine loads a model at TP=1 and at TP=2 (CPU, gloo).

Each rank loads as the engine does (``rlkit_nemo.build.model_source`` + ``build_model``): its
slice of an HF folder's safetensors, read tensor by tensor, and for ``--spec ppo`` PPO's value
head and reference as well. The figure is the peak resident set (``VmHWM`` of
/proc/self/status) of each rank, and its growth over the resident set just before loading
(torch, megatron-core and transformers imported, process groups up).

    python load_memory.py make DIR [--layers 36 --hidden 1280 --heads 20]  # a random GPT-2 (large) HF folder
    python load_memory.py compare DIR [--spec lm|ppo]                     # TP=1 then TP=2, a table
    torchrun --nproc_per_node N load_memory.py load DIR --tp N [--spec ...]  # one measurement (JSON per rank)
    torchrun --nproc_per_node 2 load_memory.py load DIR --tp 2 --checkpoint all|main|stream  # then a checkpoint's peak

``make`` writes the weights one block at a time into safetensors shards, so it never holds the
whole model either. Run on a quiet machine; the figures depend on the allocator, not on time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def vm(key: str) -> int:
    """A /proc/self/status figure in MiB (VmHWM: the peak resident set, VmRSS: now)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) // 1024
    raise KeyError(key)


def make(folder: Path, layers: int, hidden: int, heads: int, vocab: int, positions: int) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import GPT2Config

    folder.mkdir(parents=True, exist_ok=True)
    config = GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, vocab_size=vocab, n_positions=positions)
    config.save_pretrained(folder)
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g) * 0.02

    shards = {"transformer.wte.weight": rand(vocab, hidden), "transformer.wpe.weight": rand(positions, hidden),
              "transformer.ln_f.weight": torch.ones(hidden), "transformer.ln_f.bias": torch.zeros(hidden)}
    weight_map = {}
    for i in range(-1, layers):
        if i >= 0:
            h = f"transformer.h.{i}."
            shards = {h + "ln_1.weight": torch.ones(hidden), h + "ln_1.bias": torch.zeros(hidden),
                      h + "ln_2.weight": torch.ones(hidden), h + "ln_2.bias": torch.zeros(hidden),
                      h + "attn.c_attn.weight": rand(hidden, 3 * hidden), h + "attn.c_attn.bias": torch.zeros(3 * hidden),
                      h + "attn.c_proj.weight": rand(hidden, hidden), h + "attn.c_proj.bias": torch.zeros(hidden),
                      h + "mlp.c_fc.weight": rand(hidden, 4 * hidden), h + "mlp.c_fc.bias": torch.zeros(4 * hidden),
                      h + "mlp.c_proj.weight": rand(4 * hidden, hidden), h + "mlp.c_proj.bias": torch.zeros(hidden)}
        name = f"model-{i + 1:05d}.safetensors"
        save_file(shards, str(folder / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shards, name))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    params = layers * 12 * hidden * hidden + (vocab + positions) * hidden
    print(f"{folder}: GPT-2, {layers} layers x {hidden}, about {params / 1e6:.0f}M parameters ({params * 4 / 2**30:.2f} GiB fp32)")


def checkpoint(policy, folder: Path, out: Path, gather: str, shard_size: str = "1GB") -> dict:
    """The engine's checkpoint writes on a loaded model: this rank's shard (``state.save``),
    then the ``hf_model`` export, gathered as the engine did at first (``all``: every rank
    all-gathers the full model), then (``main``: the whole model gathered to the main process,
    converted and saved by ``save_pretrained``) or does now (``stream``: a layer at a time into
    shards of ``shard_size``, ``rlkit_nemo.streamed_export``). The peak is reset first
    (/proc/self/clear_refs), so it is the checkpoint's own."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from safetensors.torch import save_file
    from transformers import AutoConfig

    from rlkit_nemo import state
    from rlkit_nemo.models.sharding import full_state_dict, main_state_dict

    hf_config = AutoConfig.from_pretrained(folder)
    Path("/proc/self/clear_refs").write_text("5")
    start = vm("VmRSS")
    directory = out / f"ckpt_{gather}"
    directory.mkdir(parents=True, exist_ok=True)
    tensors = ({k: v.detach().cpu().clone().contiguous() for k, v in state.module_tensors(policy).items()}
               if gather == "all" else state.host_tensors(policy))  # the shard as state.save wrote it before / now
    save_file(tensors, str(directory / state.shard_file(ps)))
    del tensors
    main = dist.get_rank() == 0
    if gather == "stream":
        from rlkit_nemo.streamed_export import export_hf

        writer = export_hf(directory / "hf_model", policy, hf_config, None, is_main=main, max_shard_size=shard_size)
        dist.barrier()
        return {"gather": gather, "shard_size": shard_size, "rss_before_checkpoint_mib": start,
                "checkpoint_peak_rss_mib": vm("VmHWM"),
                **({"shards": len(writer.files), "held_peak_mib": writer.peak_bytes // 2**20} if main else {})}
    full = full_state_dict(policy) if gather == "all" else main_state_dict(policy, main)
    if main:
        from rlkit_nemo.convert import megatron_to_hf
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_config(hf_config)
        model.load_state_dict(megatron_to_hf({k: v for k, v in full.items() if not k.startswith("heads.")}, hf_config), strict=False)
        model.save_pretrained(directory / "hf_model")
        del model
    del full
    dist.barrier()
    return {"gather": gather, "rss_before_checkpoint_mib": start, "checkpoint_peak_rss_mib": vm("VmHWM")}


def load(folder: Path, tp: int, spec_name: str, out: Path, gather: str = "none", shard_size: str = "1GB") -> None:
    import torch

    if not torch.cuda.is_available():  # megatron-core's few CUDA calls, on the CPU (the plugin's CPU mode)
        from rlkit_nemo.cpu import enable

        enable()
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    from rlkit_core.engine import ModelSpec
    from rlkit_nemo.build import build_model, heads_factory, model_source
    from rlkit_nemo.megatron_config import translate

    dist.init_process_group("gloo")
    ps.initialize_model_parallel(tensor_model_parallel_size=tp)
    model_parallel_cuda_manual_seed(0)
    yaml_model = translate("megatron_tiny_cpu.yaml", cpu=True)["model"]
    yaml_model.update(tensor_model_parallel_size=tp)
    spec = ModelSpec("value", reference=True) if spec_name == "ppo" else ModelSpec("lm")
    before = vm("VmRSS")
    model_cfg, vocab, weights, _ = model_source(yaml_model, str(folder), 0)
    policy, ref = build_model(model_cfg, vocab, weights, spec, make_heads=heads_factory(spec), cpu=True,
                              device=torch.device("cpu"), tp=tp)
    del weights
    local = sum(p.numel() * p.element_size() for p in policy.parameters()) // 2**20
    result = {"rank": dist.get_rank(), "tp": tp, "spec": spec_name, "rss_before_mib": before,
              "peak_rss_mib": vm("VmHWM"), "policy_params_mib": local}
    if gather != "none":
        result.update(checkpoint(policy, folder, out, gather, shard_size))
    (out / f"mem_tp{tp}_rank{dist.get_rank()}.json").write_text(json.dumps(result))
    dist.barrier()
    ps.destroy_model_parallel()
    dist.destroy_process_group()


def compare(folder: Path, spec: str) -> None:
    import shutil
    import tempfile

    runner = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for tp in (1, 2):
            env = dict(os.environ, OMP_NUM_THREADS="1")
            subprocess.run([runner, "--nproc_per_node", str(tp), "--master_port", str(29500 + tp), __file__, "load",
                            str(folder), "--tp", str(tp), "--spec", spec, "--out", tmp], check=True, env=env)
            rows += [json.loads(p.read_text()) for p in sorted(Path(tmp).glob(f"mem_tp{tp}_rank*.json"))]
    print(f"| TP | rank | policy params on the rank (MiB) | RSS before loading (MiB) | peak RSS (MiB) | peak - before (MiB) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tp']} | {r['rank']} | {r['policy_params_mib']} | {r['rss_before_mib']} | {r['peak_rss_mib']} | "
              f"{r['peak_rss_mib'] - r['rss_before_mib']} |")
    tp1 = max(r["peak_rss_mib"] for r in rows if r["tp"] == 1)
    tp2 = max(r["peak_rss_mib"] for r in rows if r["tp"] == 2)
    grow1 = max(r["peak_rss_mib"] - r["rss_before_mib"] for r in rows if r["tp"] == 1)
    grow2 = max(r["peak_rss_mib"] - r["rss_before_mib"] for r in rows if r["tp"] == 2)
    print(f"\npeak RSS per rank, TP=2 / TP=1: {tp2} / {tp1} MiB = {tp2 / tp1:.2f}x "
          f"(growth while loading: {grow2} / {grow1} MiB = {grow2 / grow1:.2f}x); spec {spec}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("make", "load", "compare"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--spec", choices=("lm", "ppo"), default="lm")
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--checkpoint", choices=("none", "all", "main", "stream"), default="none",
                        help="then write a checkpoint, exporting as the engine did at first (all), then (main) or "
                             "does now (stream)")
    parser.add_argument("--shard-size", default="1GB", help="stream: the export's max_shard_size")
    parser.add_argument("--layers", type=int, default=36)
    parser.add_argument("--hidden", type=int, default=1280)
    parser.add_argument("--heads", type=int, default=20)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--positions", type=int, default=1024)
    args = parser.parse_args()
    if args.command == "make":
        make(args.folder, args.layers, args.hidden, args.heads, args.vocab, args.positions)
    elif args.command == "load":
        load(args.folder, args.tp, args.spec, args.out, args.checkpoint, args.shard_size)
    else:
        compare(args.folder, args.spec)


if __name__ == "__main__":
    main()
