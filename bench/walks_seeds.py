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

Time to quality: then, per side, how many seeds reach a figure (``--target``, default trlX's
mean final figure of the case: ilql best 0.964, sft 0.299) at an in-training evaluation, and
the mean +- SE of the process CPU seconds from ``train()``'s start to the end of the first such
evaluation (each worker records every evaluation: ``walks.EvalClock.evals``). rlkit's side can
run other settings than the peer's: ``-- --rlkit-set train.total_steps=100 --rlkit-mixed-precision bf16``.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from stats import mean_se  # noqa: E402  (beside this file)


def side_label(report: dict[str, Any], case: str, side: str) -> str:
    """The side's name with what this run set besides train.seed: ``--walks-set`` (both
    sides), and on rlkit's side ``--rlkit-set`` and ``--rlkit-mixed-precision``."""
    overrides = dict(report["spec"]["walks"]["overrides"][case])
    overrides.pop("train.seed", None)
    settings = [f"{k}={v}" for k, v in sorted(overrides.items())]
    if side.startswith("rlkit"):
        settings += list(report["spec"].get("rlkit_set") or [])
        if report["spec"].get("rlkit_mixed_precision"):
            settings.append(f"mixed_precision={report['spec']['rlkit_mixed_precision']}")
    return f"{side} ({', '.join(settings)})" if settings else side


def seed_results(report: dict[str, Any], case: str) -> tuple[int, dict[str, dict[str, Any]]]:
    """(train.seed, {side label: the first finished run's result}) of one run's JSON."""
    seed = int(report["spec"]["walks"]["overrides"][case].get("train.seed", 1000))
    sides = {}
    for side, runs in report["cases"][case]["runs"].items():
        ok = [r["result"] for r in runs if r.get("error") is None and r.get("result")]
        if ok:
            sides[side_label(report, case, side)] = ok[0]
    return seed, sides


def post_figures(result: dict[str, Any]) -> dict[str, float]:
    """A run's post-training figures (``post/optimality@beta=1`` -> ``optimality@beta=1``)."""
    return {k.split("/", 1)[1]: float(v) for k, v in result.items() if k.startswith("post/")}


def side_order(side: str) -> tuple[bool, bool, str]:
    """The peer first, then rlkit's sides, each plain before those with settings."""
    return side.startswith("rlkit"), "(" in side, side


def seed_figures(report: dict[str, Any], case: str) -> tuple[int, dict[str, dict[str, float]]]:
    """(train.seed, {side: {figure: value}}) of one run's JSON: the post-training figures
    (``optimality@beta=1``, ...) and ``best``, their maximum."""
    seed, results = seed_results(report, case)
    sides = {}
    for side, result in results.items():
        figures = post_figures(result)
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
    sides = sorted({s for _, fig in per_seed for s in fig}, key=side_order)
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


TARGETS = {"ilql": ("best", 0.964), "sft": ("optimality", 0.299)}  # trlX 0.7's mean final figures (docs/benchmarks.md)


def figure_value(figures: dict[str, float], figure: str) -> float | None:
    """``figures[figure]``; ``best`` is the highest of them (over the betas)."""
    if figure == "best":
        return max(figures.values()) if figures else None
    return figures.get(figure)


def first_reach(evals: list[dict[str, Any]], figure: str, target: float) -> dict[str, Any] | None:
    """The first in-training evaluation (``EvalClock.evals``) whose ``figure`` is at least
    ``target``; None when none is."""
    for evaluation in evals:
        value = figure_value(evaluation["figures"], figure)
        if value is not None and value >= target:
            return evaluation
    return None


def time_to_target(reports: list[dict[str, Any]], case: str, figure: str, target: float) -> str:
    """A markdown table, one row per side: how many seeds reach ``figure >= target`` at an
    in-training evaluation, the mean +- SE over those seeds of the process CPU seconds from
    ``train()``'s start to the end of that evaluation and its step, each side's ``train()``
    CPU seconds and post-training figure, and the ratio of each side's mean CPU time to the
    target, and of its mean ``train()`` CPU time, to the first side's (the peer's)."""
    per_side: dict[str, list[dict[str, Any]]] = {}
    for report in reports:
        for side, result in seed_results(report, case)[1].items():
            per_side.setdefault(side, []).append(result)
    sides = sorted(per_side, key=side_order)
    lines = [f"| side | seeds | reach {figure} >= {target} | CPU s to it (mean +- SE) | step (mean) | CPU s of train() | "
             f"post-training {figure} | CPU s to it / {sides[0] if sides else '-'}'s | train() CPU s / {sides[0] if sides else '-'}'s |",
             "|---|---|---|---|---|---|---|---|---|"]
    first_mean = first_train = None
    for side in sides:
        results = per_side[side]
        reached = [e for e in (first_reach(r.get("evals") or [], figure, target) for r in results) if e is not None]
        cpu, cpu_se = mean_se([e["cpu_s"] for e in reached])
        steps, _ = mean_se([float(e["step"]) for e in reached if e.get("step") is not None])
        train, train_se = mean_se([float(r["cpu_s"]) for r in results if "cpu_s" in r])
        post = [figure_value(post_figures(r), figure) for r in results]
        post_mean, post_se = mean_se([v for v in post if v is not None])
        first_mean = cpu if first_mean is None else first_mean
        first_train = train if first_train is None else first_train
        lines.append(f"| {side} | {len(results)} | {len(reached)} | {cpu:.1f} +- {cpu_se:.1f} | {steps:.0f} | "
                     f"{train:.1f} +- {train_se:.1f} | {post_mean:.3f} +- {post_se:.3f} | {ratio(cpu, first_mean)} | "
                     f"{ratio(train, first_train)} |")
    return "\n".join(lines)


def ratio(value: float, peer: float) -> str:
    return f"{value / peer:.2f}" if math.isfinite(value) and math.isfinite(peer) and peer > 0 else "-"


def time_to_target_per_seed(reports: list[dict[str, Any]], case: str, figure: str, target: float) -> str:
    """A markdown table, one row per seed: each side's first in-training evaluation at or
    above ``target`` (``step / CPU s``, ``-`` when none is), ``train()``'s CPU seconds and the
    post-training ``figure``. Sides are numbered in the order of :func:`time_to_target`."""
    merged: dict[int, dict[str, dict[str, Any]]] = {}
    for seed, results in (seed_results(r, case) for r in reports):
        merged.setdefault(seed, {}).update(results)
    sides = sorted({s for results in merged.values() for s in results}, key=side_order)
    header = "| seed | " + " | ".join(f"side {i + 1}: reached at step / CPU s | side {i + 1}: train() CPU s | side {i + 1}: post {figure}"
                                     for i in range(len(sides))) + " |"
    lines = [f"side {i + 1}: {side}" for i, side in enumerate(sides)] + ["", header, "|---" * (3 * len(sides) + 1) + "|"]
    for seed, results in sorted(merged.items()):
        cells = []
        for side in sides:
            result = results.get(side)
            if result is None:
                cells += ["-", "-", "-"]
                continue
            hit = first_reach(result.get("evals") or [], figure, target)
            post = figure_value(post_figures(result), figure)
            cells += [f"{hit['step']} / {hit['cpu_s']:.1f}" if hit else "-", f"{float(result.get('cpu_s', math.nan)):.1f}",
                      f"{post:.3f}" if post is not None else "-"]
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
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
    p.add_argument("--target", type=float, default=None,
                   help="the figure's value to time each side to (default: trlX's mean final figure; ilql 0.964, sft 0.299)")
    p.add_argument("--target-figure", default=None,
                   help="the in-training figure the target is for: best (highest over the betas), optimality, optimality@beta=100, ...")
    args = p.parse_args(argv)
    default_figure, default_target = TARGETS.get(args.case, ("best", None))
    figure, target = args.target_figure or default_figure, args.target if args.target is not None else default_target
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
    reports = [json.loads(Path(x).read_text()) for x in paths]
    table = summarize(reports, args.case)
    if target is not None:
        table += ("\n\nCPU time to the figure (in-training evaluations):\n\n" + time_to_target(reports, args.case, figure, target)
                  + "\n\n" + time_to_target_per_seed(reports, args.case, figure, target))
    print(table)
    if not args.summarize:
        (Path(args.out) / "summary.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
