"""rlkit's reward-model and DPO losses against TRL 1.16's ``RewardTrainer`` / ``DPOTrainer``
at the same weights, on the same batch and the same token ids.

    .venv/bin/python bench/prefs_losses_vs_trl.py [--model smollm2-135m|FOLDER] [--pairs 4] [--grpo-peer-python PATH]

Run from the project's venv; TRL runs in ``bench/.venv-trl-grpo`` (TRL 1.16.0, created on
first use as for the grpo case). Both sides load the model folder (SmolLM2-135M from the
offline asset by default), take ``--pairs`` IMDB pairs in one batch, and compute their
trainer's own loss (``prefs_rlkit.py --variant losses``, ``prefs_trl.py --variant losses``):

* DPO: the policy is the loaded model with its top two blocks perturbed
  (``prefs_common.perturb_top``), the reference the loaded model; on rlkit's side both
  reference options (log-probs precomputed before the perturbation, and the hydra reference
  of ``num_layers_unfrozen: 2``, whose copied top keeps the loaded weights);
* reward model: the score head ``prefs_common.score_weight`` on both sides.

The token ids are compared first (TRL tokenizes prompt + completion as one text, rlkit apart).
Prints the losses and their differences; exits 1 if the ids differ or a loss differs by more
than ``TOL``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from peer import PeerError, ensure_grpo_peer  # noqa: E402
from prefs_common import LOSS_SETTINGS  # noqa: E402

TOL = 1e-4  # float32 forwards of differently padded batches (rlkit: prompts left-padded; TRL: right)


def compare(rlkit: dict, trl: dict) -> tuple[list[tuple[str, float, float, float]], list[str]]:
    """Rows (case, rlkit loss, TRL loss, |difference|) for every rlkit entry, and the problems:
    token ids that differ, a setting a side lacks, a difference above ``TOL``."""
    problems = []
    for method in ("reward", "dpo"):
        ours, theirs = rlkit["tokens"].get(method), trl["tokens"].get(method)
        if ours is not None and ours != theirs:
            differ = sum(a != b for a, b in zip(ours, theirs or [])) + abs(len(ours) - len(theirs or []))
            problems.append(f"{method}: token ids differ in {differ} of {len(ours)} pairs")
    rows = []
    for label, entry in rlkit["losses"].items():
        setting = entry.get("setting", label)
        if setting not in trl["losses"]:
            problems.append(f"{label}: no TRL loss")
            continue
        diff = abs(entry["loss"] - trl["losses"][setting]["loss"])
        rows.append((label, entry["loss"], trl["losses"][setting]["loss"], diff))
        if not diff <= TOL:
            problems.append(f"{label}: |rlkit - TRL| = {diff:.2e} > {TOL:g}")
    missing = {name for name, _, _ in LOSS_SETTINGS} - {e.get("setting", k) for k, e in rlkit["losses"].items()}
    problems += [f"{name}: no rlkit loss" for name in sorted(missing)]
    return rows, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="rlkit model source name or a model folder")
    parser.add_argument("--pairs", type=int, default=4, help="pairs in the one batch")
    parser.add_argument("--grpo-peer-python", default=None, help="interpreter with trl 1.16.0")
    parser.add_argument("--keep", default=None, help="folder for the spec and both sides' results (default: a temporary one)")
    args = parser.parse_args(argv)
    import run
    from prefs_common import prefs_spec

    try:
        trl_python, versions = ensure_grpo_peer(args.grpo_peer_python)
    except PeerError as exc:
        raise SystemExit(f"bench: {exc}")
    env = run.child_env(run.parse_args(["--cases", "dpo"]))
    workdir = Path(args.keep or tempfile.mkdtemp(prefix="prefs-losses-"))
    workdir.mkdir(parents=True, exist_ok=True)
    spec = {"device": "cpu", "dtype": "float32", "threads": 1, "seed": 0,
            "model": run.resolve_model(args.model, sys.executable, env),
            "prefs": prefs_spec(batch_pairs=args.pairs, steps=1, check_pairs=args.pairs)}
    (workdir / "spec.json").write_text(json.dumps(spec, indent=1))
    results = {}
    for side, python, script in (("rlkit", sys.executable, "prefs_rlkit.py"), ("trl", trl_python, "prefs_trl.py")):
        out = workdir / f"{side}.json"
        with open(workdir / f"{side}.log", "w") as log:
            done = subprocess.run([python, str(BENCH / script), "--spec", str(workdir / "spec.json"), "--out", str(out),
                                   "--variant", "losses"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=BENCH.parent)
        if done.returncode != 0 or not out.exists():
            tail = (workdir / f"{side}.log").read_text(errors="replace").strip().splitlines()[-3:]
            raise SystemExit(f"bench: the {side} side failed (exit {done.returncode}): {' / '.join(tail)}")
        results[side] = json.loads(out.read_text())
    rows, problems = compare(results["rlkit"], results["trl"])
    print(f"TRL {versions['trl']}, torch {versions['torch']}, transformers {versions['transformers']}; model {spec['model']}; "
          f"{args.pairs} pairs in one batch; tolerance {TOL:g}")
    print(f"{'case':78} {'rlkit loss':>12} {'TRL loss':>12} {'|diff|':>9}")
    for label, ours, theirs, diff in rows:
        print(f"{label:78} {ours:12.6f} {theirs:12.6f} {diff:9.1e}")
    smoothed = [k for k, e in results["trl"]["losses"].items() if "trl_sigmoid_loss" in e]
    for name in smoothed:
        print(f"note: {name}: TRL 1.16's own sigmoid loss ignores label_smoothing "
              f"({results['trl']['losses'][name]['trl_sigmoid_loss']:.6f}); the TRL column is cDPO on TRL's log-ratios")
    for problem in problems:
        print(f"DIFFERS: {problem}")
    print(f"{len(rows) - sum(1 for p in problems if '|rlkit - TRL|' in p)}/{len(rows)} equal; results in {workdir}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
