#!/usr/bin/env bash
# rlkit at two commits on the same work, interleaved: before, after, before, after, ...
#
#   bench/before_after.sh BEFORE_REV [CASES] [ROUNDS]     (default: ppo,ilql and 3 rounds)
#
# Both sides run the BEFORE commit's bench harness and example configs (two worktrees of
# BEFORE_REV), so the work is identical; the rlkit code on PYTHONPATH differs: BEFORE_REV's
# against this checkout's. The after side's harness takes this checkout's rlkit-side worker
# scripts (WORKERS), whose changes since BEFORE_REV are import paths only: check with
# `git diff BEFORE_REV -- bench/ppo_rlkit.py`. Each round writes one JSON per side under bench/results/before_after/; the medians
# per case and side are printed at the end. Run it on a quiet machine, from the project's venv.
set -euo pipefail
before_rev=${1:?usage: bench/before_after.sh BEFORE_REV [CASES] [ROUNDS]}
cases=${2:-ppo,ilql}
rounds=${3:-3}
after=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$after/.venv/bin/python}
workers=${WORKERS:-ppo_rlkit.py}
trees=$(mktemp -d)
git -C "$after" worktree add --detach "$trees/before" "$before_rev" >/dev/null
git -C "$after" worktree add --detach "$trees/after" "$before_rev" >/dev/null
trap 'git -C "$after" worktree remove --force "$trees/before"; git -C "$after" worktree remove --force "$trees/after"' EXIT
for worker in $workers; do cp "$after/bench/$worker" "$trees/after/bench/$worker"; done
out=$after/bench/results/before_after/$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
pythonpath() { echo "$1:$1/plugins/rlkit_methods:$1/plugins/rlkit_accelerate:$1/plugins/rlkit_nemo"; }
for round in $(seq "$rounds"); do
  for side in before after; do
    src=$trees/before; [ "$side" = after ] && src=$after
    echo "round $round: $side ($src)"
    PYTHONPATH=$(pythonpath "$src") OMP_NUM_THREADS=1 "$python" "$trees/$side/bench/run.py" --no-peer \
      --cases "$cases" --repeats 1 --json "$out/$side-$round.json" > "$out/$side-$round.log" 2>&1 \
      || { echo "failed: see $out/$side-$round.log"; tail -20 "$out/$side-$round.log"; exit 1; }
  done
done
"$python" - "$out" <<'PY'
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
metric = {}
for path in sorted(out.glob("*.json")):
    which = path.stem.split("-")[0]
    for case, result in json.loads(path.read_text())["cases"].items():
        for side, runs in result["runs"].items():
            for run in runs:
                metric.setdefault((case, side, result["metric"]), {}).setdefault(which, []).append(run.get("metric"))
for (case, side, name), by in sorted(metric.items()):
    b, a = (statistics.median(by[w]) for w in ("before", "after"))
    print(f"{case}/{side} {name}: before {b:.3f}  after {a:.3f}  after/before {a / b:.3f}  "
          f"(before {[round(v, 3) for v in by['before']]}, after {[round(v, 3) for v in by['after']]})")
PY
