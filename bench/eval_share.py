"""Evaluation's share of each shipped randomwalks example's wall time.

    python bench/eval_share.py [--examples sft,ilql,ppo,ppo_lora,sft_t5,ilql_t5,ppo_t5] [--out DIR] [--set K=V ...]
                               [--start-from FOLDER]

Runs ``rlkit run examples/randomwalks/<name>_randomwalks.yml`` for each (one thread, in its own
process, checkpoints under ``--out``; the PPO examples start from the SFT example's export of
this same run, so ``sft`` / ``sft_t5`` run first, unless ``--start-from`` names an SFT
export for the GPT-2 ones), times the command, and reads the run's metrics log
(``logs/metrics.jsonl``): every evaluation logs ``time/evaluate`` (and ``time/generate``
inside it). Prints one row per example as it finishes: evaluations, seconds in evaluation, the
command's wall time and evaluation's share of it, and the last evaluation's optimality with
its standard error over the evaluated samples (``logs/samples.jsonl``), which says how
stable an evaluation figure of that size is.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "randomwalks"
ORDER = ("sft", "ilql", "ppo", "ppo_lora", "sft_t5", "ilql_t5", "ppo_t5")
STARTS = {"ppo": "sft", "ppo_lora": "sft", "ppo_t5": "sft_t5"}  # PPO examples start from an SFT export


def eval_totals(metrics_log: Path) -> dict[str, Any]:
    """Evaluations in a metrics log and the seconds they took (``time/evaluate``, and
    ``time/generate`` within them)."""
    evaluations, evaluate_s, generate_s = 0, 0.0, 0.0
    for line in metrics_log.read_text().splitlines():
        record = json.loads(line)
        if "time/evaluate" in record:
            evaluations += 1
            evaluate_s += float(record["time/evaluate"])
            generate_s += float(record.get("time/generate", 0.0))
    return {"evaluations": evaluations, "evaluate_s": evaluate_s, "generate_s": generate_s}


def last_eval_spread(samples_log: Path) -> dict[str, Any]:
    """Mean, standard error (std / sqrt(n)) and n of each ``optimality...`` key over the
    samples of the last evaluation logged."""
    from stats import mean_se

    lines = samples_log.read_text().splitlines() if samples_log.exists() else []
    if not lines:
        return {}
    samples = json.loads(lines[-1])["samples"]
    out = {}
    for key in sorted({k for row in samples for k in row if k.startswith("optimality")}):
        values = [float(row[key]) for row in samples if key in row]
        mean, se = mean_se(values)
        out[key] = {"mean": mean, "se": se, "n": len(values)}
    return out


def yaml_path(name: str) -> Path:
    if name.endswith("_t5"):
        return EXAMPLES / f"{name[:-3]}_t5_randomwalks.yml"
    return EXAMPLES / f"{name}_randomwalks.yml"


def run_example(name: str, out: Path, sets: list[str], rlkit: list[str], env: dict[str, str],
                start_from: str | None = None) -> dict[str, Any]:
    folder = out / name
    argv = [*rlkit, "run", str(yaml_path(name)), "--set", f"train.checkpoint_dir={folder}", *sum((["--set", s] for s in sets), [])]
    if name in STARTS and start_from and not name.endswith("_t5"):
        argv += ["--set", f"model.model_path={start_from}"]
    elif name in STARTS:
        exports = sorted((out / STARTS[name]).glob("**/hf_model"))
        if not exports:
            raise SystemExit(f"eval_share: {name} starts from the {STARTS[name]} example's export; run {STARTS[name]} first")
        argv += ["--set", f"model.model_path={exports[-1]}"]
    start = time.perf_counter()
    with open(out / f"{name}.log", "w") as log:
        done = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"eval_share: {name} failed (exit {done.returncode}); see {out / f'{name}.log'}")
    totals = eval_totals(folder / "logs" / "metrics.jsonl")
    return {"example": name, "wall_s": wall, **totals, "share": totals["evaluate_s"] / wall,
            "last_eval": last_eval_spread(folder / "logs" / "samples.jsonl")}


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| example | evaluations | evaluation s | generate s | wall s | evaluation share | last evaluation (mean +- SE, n) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        last = "; ".join(f"{k} {v['mean']:.3f} +- {v['se']:.3f} ({v['n']})" for k, v in r.get("last_eval", {}).items())
        lines.append(f"| {r['example']} | {r['evaluations']} | {r['evaluate_s']:.1f} | {r['generate_s']:.1f} | "
                     f"{r['wall_s']:.1f} | {100 * r['share']:.1f}% | {last} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", default=",".join(ORDER), help=f"comma-separated, from {','.join(ORDER)}")
    p.add_argument("--out", default="/tmp/rlkit-eval-share", help="checkpoints, logs and results.json")
    p.add_argument("--set", dest="sets", action="append", default=[], help="override for every example (rlkit run --set)")
    p.add_argument("--start-from", default=None, help="SFT export the GPT-2 PPO examples start from (else sft runs first)")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.examples.split(",") if n.strip()]
    unknown = [n for n in names if n not in ORDER]
    if unknown:
        p.error(f"--examples: unknown {', '.join(unknown)}; choose from {','.join(ORDER)}")
    needed = {STARTS[m] for m in names if m in STARTS and not (args.start_from and not m.endswith("_t5"))}
    names = [n for n in ORDER if n in names or n in needed]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    rlkit = [str(Path(sys.executable).parent / "rlkit")]
    rows = []
    for name in names:
        print(f"eval_share: {name}", file=sys.stderr)
        rows.append(run_example(name, out, args.sets, rlkit, env, args.start_from))
        (out / "results.json").write_text(json.dumps(rows, indent=1) + "\n")
        print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
