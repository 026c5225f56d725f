"""The preference chain on SmolLM2 and IMDB reviews, stage after stage:

    python examples/preferences/chain.py [--only STAGE ...] [--overwrite]

1. ``pairs``: pairs.py samples four continuations of each of 1024 IMDB openings and pairs the
   best VADER score against the worst, keeping gaps of 0.5 or more -> runs/prefs/pairs.jsonl,
   pairs_eval.jsonl (held out)
2. ``reward_model``: rlkit run rm_smollm2.yml -> runs/prefs/rm/hf_model (a sequence classifier)
3. ``rm_accuracy``: evaluate.py accuracy on pairs_eval.jsonl (through the ``reward_model`` reward)
4. ``ppo``: rlkit run ppo_rm_smollm2.yml, rewarded by the reward model -> runs/prefs/ppo_rm
5. ``dpo``: rlkit run dpo_smollm2.yml on the same pairs -> runs/prefs/dpo
6. ``vader``: evaluate.py vader on SmolLM2, the PPO model and the DPO model: the true VADER of
   16 sampled continuations of each of the main job's 32 eval prompts

Each stage is a child process, run after the one before it; its wall time, CPU time (user +
system of the child) and the load average before and after are printed and written to
runs/prefs/chain.json (a stage run again replaces its entry). ``--overwrite`` lets the rlkit
stages replace an earlier run's checkpoint folder.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
OUT = Path("runs/prefs")


def stages(overwrite: bool) -> dict[str, list[str]]:
    python, rlkit = sys.executable, [sys.executable, "-m", "rlkit_core"]
    sets = ["--set", "train.overwrite_checkpoint_dir=true"] if overwrite else []
    return {
        "pairs": [python, str(HERE / "pairs.py"), "--out", str(OUT)],
        "reward_model": [*rlkit, "run", str(HERE / "rm_smollm2.yml"), *sets],
        "rm_accuracy": [python, str(HERE / "evaluate.py"), "accuracy", str(OUT / "rm" / "hf_model"),
                        str(OUT / "pairs_eval.jsonl"), "--out", str(OUT / "rm_accuracy.json")],
        "ppo": [*rlkit, "run", str(HERE / "ppo_rm_smollm2.yml"), *sets],
        "dpo": [*rlkit, "run", str(HERE / "dpo_smollm2.yml"), *sets],
        "vader": [python, str(HERE / "evaluate.py"), "vader", "smollm2-135m", str(OUT / "ppo_rm" / "hf_model"),
                  str(OUT / "dpo" / "hf_model"), "--out", str(OUT / "vader.json")],
    }


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    commands = stages(overwrite="--overwrite" in sys.argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(commands), help="run these stages (in the chain's order)")
    parser.add_argument("--overwrite", action="store_true", help="replace earlier runs' checkpoint folders")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    record_path = OUT / "chain.json"
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    for name, command in commands.items():
        if args.only and name not in args.only:
            continue
        print(f"== {name}: {' '.join(command)}", flush=True)
        load_before, cpu_before, start = os.getloadavg(), cpu_of_children(), time.time()
        code = subprocess.call(command)
        timing = {"wall_s": round(time.time() - start, 1), "cpu_s": round(cpu_of_children() - cpu_before, 1),
                  "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in os.getloadavg()],
                  "exit": code}
        record[name] = timing
        record_path.write_text(json.dumps(record, indent=1) + "\n")
        print(f"== {name}: {json.dumps(timing)}", flush=True)
        if code:
            sys.exit(f"chain: stage {name!r} failed (exit {code}); the stages after it need its output")


if __name__ == "__main__":
    main()
