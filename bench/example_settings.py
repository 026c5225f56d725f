"""Padded vs packed training steps of every shipped example, through ``rlkit run`` itself.

    OMP_NUM_THREADS=1 nice .venv/bin/python bench/example_settings.py --out DIR
        [--only sft_randomwalks,ppo_smollm2] [--rounds 2] [--sft-model FOLDER] [--t5-sft-model FOLDER]
        [--prefs FOLDER]
    .venv/bin/python bench/example_settings.py --summarize DIR/results.json [DIR2/results.json ...]

Each example runs as ``rlkit run <yml> --set train.total_steps=N --set train.packing=<mode>``
(the NeMo examples under ``--nemo-python``; plus the few ``--set``s in ``EXAMPLES`` that make a
start model or data file available or shrink the evaluation and the rollout phase: none of them
changes a training batch's shape), one process at a time, one thread, padded and packed
alternating and the order flipped every round. The figure is the engine's own ``cpu/step``
(process CPU seconds of the whole optimizer step: collate, forward, backward, AdamW) from the
run's ``logs/metrics.jsonl``, the first step of each run left out (warm-up). Examples whose
engine refuses ``train.packing`` (seq2seq) are run with it once to record the refusal. Writes
``DIR/results.json``, each run's output and its ``metrics.jsonl``; the run's folder (its final
checkpoint) is removed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from run import rlkit_cli  # noqa: E402  (the bench's own way to call the console script)

SMALL_EVAL = {"data.eval_prompts.kwargs.n": 2}  # evaluation is not timed: keep it short
SFT_MODEL = {"model.model_path": "{sft_model}"}
PAIRS = {"data.samples.kwargs.path": "{prefs}/pairs.jsonl"}
LOSS_KEYS = ("losses/total_loss", "losses/loss", "loss")  # PPO-like, ILQL, the rest

# name -> (yml, steps, extra --sets, or the reason it is only checked for refusal)
EXAMPLES: dict[str, dict[str, Any]] = {
    "sft_randomwalks": {"yml": "randomwalks/sft_randomwalks.yml", "steps": 6},
    "ilql_randomwalks": {"yml": "randomwalks/ilql_randomwalks.yml", "steps": 6},
    "ppo_randomwalks": {"yml": "randomwalks/ppo_randomwalks.yml", "steps": 6, "sets": SFT_MODEL},
    "ppo_lora_randomwalks": {"yml": "randomwalks/ppo_lora_randomwalks.yml", "steps": 6, "sets": SFT_MODEL},
    "grpo_randomwalks": {"yml": "randomwalks/grpo_randomwalks.yml", "steps": 6, "sets": SFT_MODEL},
    "rloo_randomwalks": {"yml": "randomwalks/rloo_randomwalks.yml", "steps": 6, "sets": SFT_MODEL},
    "rft_randomwalks": {"yml": "randomwalks/rft_randomwalks.yml", "steps": 4, "sets": SFT_MODEL},
    "sft_t5_randomwalks": {"yml": "randomwalks/sft_t5_randomwalks.yml", "refused": True},
    "ilql_t5_randomwalks": {"yml": "randomwalks/ilql_t5_randomwalks.yml", "refused": True},
    "ppo_t5_randomwalks": {"yml": "randomwalks/ppo_t5_randomwalks.yml", "refused": True,
                           "sets": {"model.model_path": "{t5_sft_model}"}},
    "nemo_sft_randomwalks": {"yml": "nemo/sft_randomwalks.yml", "steps": 4, "nemo": True},
    "nemo_ppo_randomwalks": {"yml": "nemo/ppo_randomwalks.yml", "steps": 4, "nemo": True, "sets": SFT_MODEL},
    "sft_chat_smollm2": {"yml": "chat/sft_chat_smollm2.yml", "steps": 4},
    "ppo_smollm2": {"yml": "sentiments/ppo_smollm2.yml", "steps": 4,
                    "sets": {**SMALL_EVAL, "method.num_rollouts": 32}},  # one batch, 4 PPO epochs
    "grpo_smollm2": {"yml": "sentiments/grpo_smollm2.yml", "steps": 4, "sets": SMALL_EVAL},
    "ilql_smollm2": {"yml": "sentiments/ilql_smollm2.yml", "steps": 4, "sets": SMALL_EVAL},
    "rft_smollm2": {"yml": "sentiments/rft_smollm2.yml", "steps": 3,
                    "sets": {**SMALL_EVAL, "data.prompts.kwargs.n": 16}},
    "rm_smollm2": {"yml": "preferences/rm_smollm2.yml", "steps": 4, "sets": PAIRS},
    "dpo_smollm2": {"yml": "preferences/dpo_smollm2.yml", "steps": 4, "sets": {**SMALL_EVAL, **PAIRS}},
    "ppo_rm_smollm2": {"yml": "preferences/ppo_rm_smollm2.yml", "steps": 4,
                       "sets": {**SMALL_EVAL, "method.num_rollouts": 32, "reward.kwargs.path": "{prefs}/rm/hf_model"}},
}
# examples this bench does not run, and why (the docs' table says so too)
NOT_MEASURED = {
    "configs/ppo_trlx_sentiments.yml": "trlX's own config, unchanged on purpose; its model is a hub name",
}


def step_seconds(metrics: Path) -> tuple[list[float], float | None]:
    """``cpu/step`` of every training record but the first, and the first record's loss."""
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    train = [r for r in records if r.get("kind") == "train" and "cpu/step" in r]
    loss = next((v for k, v in (train[0] if train else {}).items() if k in LOSS_KEYS), None)
    return [r["cpu/step"] for r in train[1:]], loss


def run_once(name: str, spec: dict[str, Any], packing: bool, args, tag: str) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix=f"rlkit-example-settings-{name}-"))
    steps = spec.get("steps", 1)
    sets = {"train.total_steps": steps, "train.eval_interval": 10**6, "train.checkpoint_interval": 10**6,
            "train.checkpoint_dir": str(folder), "train.packing": str(packing).lower(), **spec.get("sets", {})}
    python = args.nemo_python if spec.get("nemo") else sys.executable
    argv = [*rlkit_cli(python), "run", str(ROOT / "examples" / spec["yml"])]
    folders = {"sft_model": args.sft_model, "t5_sft_model": args.t5_sft_model, "prefs": args.prefs}
    for key, value in sets.items():
        argv += ["--set", f"{key}={str(value).format(**folders)}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    log = args.out / f"{name}-{tag}.log"
    with log.open("w") as handle:
        handle.write(" ".join(argv) + "\n")
        handle.flush()
        rc = subprocess.run(argv, env=env, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT).returncode
    out: dict[str, Any] = {"packing": packing, "rc": rc, "log": str(log)}
    metrics = folder / "logs" / "metrics.jsonl"
    if rc == 0 and metrics.is_file():
        out["cpu_step"], out["loss"] = step_seconds(metrics)
        shutil.copy(metrics, args.out / f"{name}-{tag}.metrics.jsonl")
    else:
        out["last_line"] = log.read_text().strip().splitlines()[-1]
    shutil.rmtree(folder)  # the final checkpoint and export: GBs a SmolLM2 run, of no use here
    return out


def measure(name: str, spec: dict[str, Any], args) -> dict[str, Any]:
    if spec.get("refused"):
        return {"refused": run_once(name, spec, True, args, "refusal")}
    runs = []
    for r in range(args.start_round, args.start_round + args.rounds):
        for packing in ((False, True) if r % 2 == 0 else (True, False)):
            runs.append(run_once(name, spec, packing, args, f"r{r}-{'packed' if packing else 'padded'}"))
            print(name, runs[-1], flush=True)
    return summary(runs)


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median ``cpu/step`` of each mode over every run's timed steps, and their ratio."""
    result: dict[str, Any] = {"runs": runs}
    for packing, mode in ((False, "padded"), (True, "packed")):
        seconds = [s for run in runs if run["packing"] == packing for s in run.get("cpu_step", [])]
        result[mode] = statistics.median(seconds) if seconds else None
    if result["padded"] and result["packed"]:
        result["speedup"] = result["padded"] / result["packed"]
    return result


def merged(files: list[Path]) -> dict[str, Any]:
    """Several runs' results.json as one: each example's runs pooled."""
    results: dict[str, Any] = {}
    for file in files:
        for name, r in json.loads(file.read_text()).items():
            if "refused" in r:
                results[name] = r
            else:
                results[name] = summary(results.get(name, {}).get("runs", []) + r["runs"])
    return results


def print_table(results: dict[str, Any]) -> None:
    print(f"{'example':24} {'padded s':>9} {'packed s':>9} {'x':>6}  steps timed / mode")
    for name, r in results.items():
        if "refused" in r:
            print(f"{name:24} refused: {r['refused'].get('last_line', r['refused'])}")
            continue
        fmt = lambda v: f"{v:9.3f}" if v else f"{'-':>9}"  # noqa: E731
        timed = [sum(len(run.get("cpu_step", [])) for run in r["runs"] if run["packing"] == p) for p in (False, True)]
        print(f"{name:24} {fmt(r['padded'])} {fmt(r['packed'])} {r.get('speedup', 0):6.2f}  {timed[0]} / {timed[1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", default="", help="comma-separated example names (default: all)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--start-round", type=int, default=0, help="1: a second round apart, packed first")
    parser.add_argument("--sft-model", default="ckpts/randomwalks_sft/hf_model")
    parser.add_argument("--t5-sft-model", default="ckpts/randomwalks_t5_sft/hf_model")
    parser.add_argument("--nemo-python", default=sys.executable, help="the NeMo venv's python, for the nemo examples")
    parser.add_argument("--prefs", default="runs/prefs", help="the preference chain's folder (pairs.jsonl, rm/hf_model)")
    parser.add_argument("--summarize", type=Path, nargs="+", help="results.json files: print their runs pooled")
    args = parser.parse_args()
    if args.summarize:
        return print_table(merged(args.summarize))
    if args.out is None:
        raise SystemExit("example_settings: --out DIR is required to run (or --summarize FILES to print)")
    args.out.mkdir(parents=True, exist_ok=True)
    names = [n for n in args.only.split(",") if n] or list(EXAMPLES)
    unknown = [n for n in names if n not in EXAMPLES]
    if unknown:
        raise SystemExit(f"example_settings: unknown example {', '.join(unknown)}; choose from {', '.join(EXAMPLES)}")
    results_file = args.out / "results.json"
    results = json.loads(results_file.read_text()) if results_file.is_file() else {}
    for name in names:
        results[name] = measure(name, EXAMPLES[name], args)
        results_file.write_text(json.dumps(results, indent=1))
    print_table(results)


if __name__ == "__main__":
    main()
