"""trlX's randomwalks on the NeMo engine: the accelerate examples' configs
(examples/randomwalks/{ilql,sft,ppo}_randomwalks.yml, trlX's settings) with the trainer switched
to NeMo's and a one-process Megatron YAML (the tiny CPU YAML at TP=1, PP=1, one micro-batch of
train.batch_size). Runs ILQL, then SFT, then PPO from the SFT model, as `rlkit run` does
(load_config + train_from_config, in this process), and prints each run's evaluations.
Without a GPU it applies the CPU patches of tests/nemo/megatron/conftest.py first
(megatron-core hard-codes CUDA in a few places).

    OMP_NUM_THREADS=1 python plugins/rlkit_nemo/scripts/randomwalks.py OUT [ilql] [sft] [ppo]
"""

from __future__ import annotations

import json
import sys
from importlib.resources import files
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "randomwalks"
TRAINERS = {"ilql": "NeMoILQLTrainer", "sft": "NeMoSFTTrainer", "ppo": "NeMoPPOTrainer"}


def megatron_yaml(out: Path, batch_size: int) -> Path:
    cfg = yaml.safe_load((files("rlkit_nemo") / "configs" / "megatron_tiny_cpu.yaml").read_text())
    cfg["trainer"].update(devices=1)
    cfg["model"].update(tensor_model_parallel_size=1, global_batch_size=batch_size, micro_batch_size=batch_size)
    path = out / f"megatron_walks_{batch_size}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run(method: str, out: Path) -> list[dict]:
    example = yaml.safe_load((EXAMPLES / f"{method}_randomwalks.yml").read_text())
    batch_size = example["train"]["batch_size"]
    checkpoints = out / method
    sets = [f"train.trainer={TRAINERS[method]}", f"train.checkpoint_dir={checkpoints}",
            f"train.trainer_kwargs={{megatron_cfg: {megatron_yaml(out, batch_size)}}}"]
    if method == "ppo":
        sft = out / "sft" / "checkpoint_500" / "hf_model"
        sets.append(f"model.model_path={sft}")
    from rlkit_core import load_config
    from rlkit_core.run import train_from_config

    print(f"$ rlkit run {EXAMPLES / f'{method}_randomwalks.yml'} " + " ".join(f"--set '{s}'" for s in sets), flush=True)
    train_from_config(load_config(EXAMPLES / f"{method}_randomwalks.yml", sets))
    lines = (checkpoints / "logs" / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "eval"]


def main(out: Path, methods: list[str]) -> None:
    import torch

    if not torch.cuda.is_available():
        sys.path.insert(0, str(ROOT / "tests" / "nemo" / "megatron"))
        from conftest import patch_for_cpu

        patch_for_cpu()
    out.mkdir(parents=True, exist_ok=True)
    for method in methods:
        evals = run(method, out)
        keys = sorted(k for k in evals[-1] if k.startswith(("metrics/optimality", "reward/mean")))
        print(f"{method}: " + "; ".join(f"step {e['step']}: " + ", ".join(f"{k}={e[k]:.3f}" for k in keys) for e in evals), flush=True)
        best = {k: max(e[k] for e in evals) for k in keys}
        print(f"{method} best: {best}", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:] or ["ilql", "sft", "ppo"])
