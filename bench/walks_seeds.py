"""The randomwalks cases over several training seeds: is a difference between rlkit and trlX
learning, or seed noise? One ``bench/run.py`` per seed (``--walks-set train.seed=S``, the graph
fixed by the task seed), at most ``--jobs`` at once, then each side's post-training figures
per seed, their mean +- standard error over seeds, and the paired difference rlkit - trlX.

    python bench/walks_seeds.py --seeds 1000,1001,1002,1003,1004 [--case ilql] [--jobs 2] [--out DIR] \\
        -- --trlx-python bench/.venv-trlx/bin/python        # the rest goes to every bench/run.py
    python bench/walks_seeds.py --summarize DIR/seed-*.json  # the table again, from the results

Each run's JSON is ``DIR/seed-S.json`` and its log ``DIR/seed-S.log``; the summary is printed
and written to ``DIR/summary.md``. The standard error is the sample standard deviation over
seeds divided by sqrt(number of seeds); "best" is the highest figure of a run (over the betas).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from stats import mean_se  # noqa: E402  (beside this file)


def seed_figures(report: dict[str, Any], case: str) -> tuple[int, dict[str, dict[str, float]]]:
    """(train.seed, {side: {figure: value}}) of one run's JSON: the post-training figures
    (``optimality@beta=1``, ...) and ``best``, their maximum."""
    overrides = dict(report["spec"]["walks"]["overrides"][case])
    seed = int(overrides.pop("train.seed", 1000))
    setting = ", ".join(f"{k}={v}" for k, v in sorted(overrides.items()))  # what else this run set
    sides = {}
    for side, runs in report["cases"][case]["runs"].items():
        side = f"{side} ({setting})" if setting else side
        ok = [r["result"] for r in runs if r.get("error") is None and r.get("result")]
        if not ok:
            continue
        figures = {k.split("/", 1)[1]: float(v) for k, v in ok[0].items() if k.startswith("post/")}
        if figures:
            figures["best"] = max(figures.values())
        sides[side] = figures
    return seed, sides


def figure_order(name: str) -> tuple[int, float, str]:
    """``optimality@beta=0`` < ``@beta=1`` < ``@beta=100`` < ``best``."""
    if name == "best":
        return (2, 0.0, name)
    _, _, value = name.partition("=")
    try:
        return (0, float(value), name)
    except ValueError:
        return (1, 0.0, name)


def summarize(reports: list[dict[str, Any]], case: str = "ilql") -> str:
    """A markdown table: one row per seed, then mean +- SE per side and the paired difference
    of each side from the first (the peer's; else the first rlkit side). Runs of one seed with
    other settings (``--walks-set`` besides train.seed) are further sides of that seed."""
    merged: dict[int, dict[str, dict[str, float]]] = {}
    for seed, figures in (seed_figures(r, case) for r in reports):
        merged.setdefault(seed, {}).update(figures)
    per_seed = sorted(merged.items())
    sides = sorted({s for _, fig in per_seed for s in fig}, key=lambda s: (s.startswith("rlkit"), "(" in s, s))
    figures = sorted({f for _, fig in per_seed for side in fig.values() for f in side}, key=figure_order)
    short = {f: f.replace("optimality@", "").replace("optimality", "opt") for f in figures}
    columns = [(side, f) for side in sides for f in figures]
    header = "| seed | " + " | ".join(f"{side} {short[f]}" for side, f in columns) + " |"
    lines = [header, "|" + "---|" * (len(columns) + 1)]
    for seed, fig in per_seed:
        cells = [f"{fig[side][f]:.3f}" if f in fig.get(side, {}) else "-" for side, f in columns]
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    cells = []
    for side, f in columns:
        mean, se = mean_se([fig[side][f] for _, fig in per_seed if f in fig.get(side, {})])
        cells.append(f"{mean:.3f} +- {se:.3f}")
    lines.append(f"| mean +- SE (n={len(per_seed)}) | " + " | ".join(cells) + " |")
    for other in sides[1:]:
        lines += ["", f"| paired difference ({other} - {sides[0]}) | mean +- SE | seeds where it is higher |", "|---|---|---|"]
        for f in figures:
            diffs = [fig[other][f] - fig[sides[0]][f] for _, fig in per_seed
                     if f in fig.get(other, {}) and f in fig.get(sides[0], {})]
            mean, se = mean_se(diffs)
            lines.append(f"| {short[f]} | {mean:+.3f} +- {se:.3f} | {sum(d > 0 for d in diffs)} of {len(diffs)} |")
    return "\n".join(lines)


def run_seeds(seeds: list[int], case: str, jobs: int, out: Path, extra: list[str]) -> list[Path]:
    """One ``bench/run.py --cases CASE --repeats 1 --walks-set train.seed=S`` per seed, at most
    ``jobs`` at once; returns the JSON paths of the runs that finished."""
    out.mkdir(parents=True, exist_ok=True)
    pending, running, done = list(seeds), [], []
    while pending or running:
        while pending and len(running) < jobs:
            seed = pending.pop(0)
            path = out / f"seed-{seed}.json"
            argv = [sys.executable, str(BENCH / "run.py"), "--cases", case, "--repeats", "1",
                    "--walks-set", f"train.seed={seed}", "--json", str(path), "--results-dir", str(out / f"results-{seed}"), *extra]
            log = open(out / f"seed-{seed}.log", "w")
            print(f"walks_seeds: seed {seed} started ({time.strftime('%H:%M:%S')})", file=sys.stderr)
            running.append((seed, path, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=BENCH.parent), log))
        time.sleep(2)
        for item in list(running):
            seed, path, proc, log = item
            if proc.poll() is None:
                continue
            running.remove(item)
            log.close()
            print(f"walks_seeds: seed {seed} exit {proc.returncode} ({time.strftime('%H:%M:%S')})", file=sys.stderr)
            if path.is_file():
                done.append(path)
    return done


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="1000,1001,1002,1003,1004", help="training seeds (train.seed), comma-separated")
    p.add_argument("--case", default="ilql", choices=["ilql", "sft", "walks-ppo"])
    p.add_argument("--jobs", type=int, default=1, help="bench runs at once (each runs one worker at a time)")
    p.add_argument("--out", default=str(BENCH / "results" / "seeds"), help="folder for each seed's JSON and log")
    p.add_argument("--summarize", nargs="+", metavar="JSON", help="only print the table of these finished runs")
    args = p.parse_args(argv)
    if args.summarize:
        paths = [Path(x) for x in args.summarize]
    else:
        try:
            seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        except ValueError:
            raise SystemExit(f"walks_seeds: --seeds {args.seeds!r}: expected integers, e.g. 1000,1001,1002")
        paths = run_seeds(seeds, args.case, max(1, args.jobs), Path(args.out), extra)
        if len(paths) < len(seeds):
            print(f"walks_seeds: {len(seeds) - len(paths)} of {len(seeds)} seeds left no JSON; see their logs", file=sys.stderr)
    if not paths:
        return 1
    table = summarize([json.loads(Path(x).read_text()) for x in paths], args.case)
    print(table)
    if not args.summarize:
        (Path(args.out) / "summary.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
