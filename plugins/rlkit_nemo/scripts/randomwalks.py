"""trlX's randomwalks on the NeMo engine: the accelerate examples' configs
(examples/randomwalks/{ilql,sft,ppo,grpo,rloo}_randomwalks.yml) with the trainer switched
to NeMo's and the tiny CPU Megatron YAML at TP=1 and PP=1 (or ``--pp N`` under torchrun with
N processes: the model split into N pipeline stages), one micro-batch of train.batch_size.
Runs ILQL, then SFT, then PPO from the SFT model (and GRPO, RLOO from it when named), as
`rlkit run` does (load_config + train_from_config, in this process), and prints each run's
evaluations. Without a GPU it turns on the plugin's CPU mode (rlkit_nemo.cpu) first
(megatron-core hard-codes CUDA in a few places).

    OMP_NUM_THREADS=1 python plugins/rlkit_nemo/scripts/randomwalks.py OUT [ilql] [sft] [ppo] [grpo] [rloo]
    OMP_NUM_THREADS=1 torchrun --nproc_per_node 2 plugins/rlkit_nemo/scripts/randomwalks.py OUT ppo --pp 2
      (PPO at PP=2 from OUT/sft's model, into OUT/ppo_pp2)
"""

from __future__ import annotations

import json
import os
import sys
from importlib.resources import files
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "randomwalks"
TRAINERS = {"ilql": "NeMoILQLTrainer", "sft": "NeMoSFTTrainer", "ppo": "NeMoPPOTrainer",
            "grpo": "NeMoGRPOTrainer", "rloo": "NeMoRLOOTrainer"}
FROM_SFT = ("ppo", "grpo", "rloo")  # start from OUT/sft's model


def megatron_yaml(out: Path, batch_size: int, optimizer: dict, pp: int = 1) -> Path:
    cfg = yaml.safe_load((files("rlkit_nemo") / "configs" / "megatron_tiny_cpu.yaml").read_text())
    # ILQL and SFT take the YAML's optimizer, as trlX's NeMo trainers did: the example's (constant rate)
    cfg["model"]["optim"] = dict(name=optimizer["name"], **optimizer["kwargs"], sched=dict(name=None))
    cfg["trainer"].update(devices=pp)
    cfg["model"].update(tensor_model_parallel_size=1, pipeline_model_parallel_size=pp, global_batch_size=batch_size,
                        micro_batch_size=batch_size)
    path = out / f"megatron_walks_{batch_size}_pp{pp}.yaml"
    part = path.with_name(f"{path.name}.{os.environ.get('RANK', 0)}")
    part.write_text(yaml.safe_dump(cfg))
    os.replace(part, path)  # every rank writes the same file whole: none reads a half-written one
    return path


def run(method: str, out: Path, pp: int = 1) -> list[dict]:
    example = yaml.safe_load((EXAMPLES / f"{method}_randomwalks.yml").read_text())
    batch_size = example["train"]["batch_size"]
    checkpoints = out / (method if pp == 1 else f"{method}_pp{pp}")
    sets = [f"train.trainer={TRAINERS[method]}", f"train.checkpoint_dir={checkpoints}",
            f"train.trainer_kwargs={{megatron_cfg: {megatron_yaml(out, batch_size, example['optimizer'], pp)}}}"]
    if method in FROM_SFT:
        sft = out / "sft" / "checkpoint_500" / "hf_model"
        sets.append(f"model.model_path={sft}")
    from rlkit_core import load_config
    from rlkit_core.run import train_from_config

    say(f"$ rlkit run {EXAMPLES / f'{method}_randomwalks.yml'} " + " ".join(f"--set '{s}'" for s in sets))
    train_from_config(load_config(EXAMPLES / f"{method}_randomwalks.yml", sets))
    if int(os.environ.get("RANK", 0)) != 0:
        return []  # the main process wrote the metrics and reports them
    lines = (checkpoints / "logs" / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "eval"]


def say(line: str) -> None:
    if int(os.environ.get("RANK", 0)) == 0:  # under torchrun: the main process speaks
        print(line, flush=True)


def main(out: Path, methods: list[str], pp: int = 1) -> None:
    import torch

    if not torch.cuda.is_available():
        from rlkit_nemo.cpu import enable  # the plugin's CPU mode (gloo)

        enable()
    out.mkdir(parents=True, exist_ok=True)
    for method in methods:
        evals = run(method, out, pp)
        if not evals:
            continue
        keys = sorted(k for k in evals[-1] if k.startswith(("metrics/optimality", "reward/mean")))
        name = method if pp == 1 else f"{method} (PP={pp})"
        say(f"{name}: " + "; ".join(f"step {e['step']}: " + ", ".join(f"{k}={e[k]:.3f}" for k in keys) for e in evals))
        say(f"{name} best: { {k: max(e[k] for e in evals) for k in keys} }")


def parse_args(argv: list[str]) -> tuple[Path, list[str], int]:
    """OUT [method ...] [--pp N]; -h/--help prints the usage, anything else unknown is one line."""
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        raise SystemExit(0 if argv else 2)
    out, args, pp = argv[0], argv[1:], 1
    if "--pp" in args:
        at = args.index("--pp")
        if at + 1 >= len(args) or not args[at + 1].isdigit():
            raise SystemExit("randomwalks.py: --pp needs a number of pipeline stages, e.g. --pp 2")
        pp = int(args[at + 1])
        del args[at:at + 2]
    unknown = [a for a in [out, *args] if a.startswith("-")] + [a for a in args if a not in TRAINERS]
    if unknown:
        raise SystemExit(f"randomwalks.py: unknown argument {unknown[0]!r}; usage: OUT [{'] ['.join(TRAINERS)}] [--pp N]")
    return Path(out), args, pp


if __name__ == "__main__":
    out, methods, pp = parse_args(sys.argv[1:])
    main(out, methods or ["ilql", "sft", "ppo"], pp)
