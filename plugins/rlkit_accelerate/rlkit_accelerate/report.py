"""The end-of-run report: what changed, how fast, and a plot.

Read from a run's ``logs/metrics.jsonl`` and ``logs/samples.jsonl``: the eval reward (or
first metric) before and after, the same eval prompts answered at the first and the last
evaluation, where the time went per phase (with tokens/s), and ``report.png`` with reward,
KL and losses over steps. ``rlkit report RUN_DIR`` prints it again.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from rlkit_core.errors import RlkitError
from rlkit_accelerate.metrics_log import METRICS_FILE, SAMPLES_FILE, read_metrics

PHASES = {
    "rollout: generate": "time/rollout_generate",
    "rollout: score": "time/rollout_score",
    "rollout: reference + value forward": "time/rollout_forward",
    "train: forward": "time/forward",
    "train: backward": "time/backward",
}
RATES = {"generate": "tokens_per_second/generate", "reference + value forward": "tokens_per_second/forward"}


def logs_dir(run_dir: str | Path) -> Path:
    """A run's checkpoint_dir (holding ``logs/``) or the logs folder itself."""
    run_dir = Path(run_dir)
    for candidate in (run_dir / "logs", run_dir):
        if (candidate / METRICS_FILE).is_file():
            return candidate
    raise RlkitError(f"{run_dir}: no {METRICS_FILE} here or in logs/; pass a run's checkpoint_dir")


def headline(evals: list[dict[str, Any]]) -> str | None:
    """The score the report follows: reward/mean, else the first metric."""
    keys = [k for k in evals[0] if k.startswith("reward/mean")] or [k for k in evals[0] if k.startswith("metrics/")]
    return keys[0] if keys else None


def summary(run_dir: str | Path) -> dict[str, Any]:
    logs = logs_dir(run_dir)
    records = read_metrics(logs)
    evals = [r for r in records if r["kind"] == "eval"]
    out: dict[str, Any] = {"logs": logs, "steps": max((r["step"] for r in records), default=0), "evals": evals}
    key = headline(evals) if evals else None
    if key:
        out["score"], out["before"], out["after"] = key, evals[0][key], evals[-1][key]
    seconds: dict[str, float] = defaultdict(float)
    for record in records:
        for phase, name in PHASES.items():
            seconds[phase] += float(record.get(name, 0.0) or 0.0)
        if record["kind"] == "eval":
            seconds["evaluation"] += sum(float(v) for k, v in record.items() if k.startswith("time/generate"))
    out["seconds"] = {k: v for k, v in seconds.items() if v > 0}
    rollouts = [r for r in records if r["kind"] == "rollout"]
    out["rates"] = {
        phase: sum(r[name] for r in rollouts) / len(rollouts)
        for phase, name in RATES.items()
        if rollouts and all(name in r for r in rollouts)
    }
    samples_path = logs / SAMPLES_FILE
    out["samples"] = read_metrics(logs, SAMPLES_FILE) if samples_path.is_file() else []
    return out


def print_report(info: dict[str, Any], console: Console | None = None, limit: int = 6) -> None:
    console = console or Console(stderr=True)
    if "score" in info:
        change = info["after"] - info["before"]
        console.print(f"[bold]{info['score']}[/]: {info['before']:.4g} -> {info['after']:.4g} ({change:+.4g}) over {info['steps']} steps")
    if len(info["samples"]) >= 2:
        first, last = info["samples"][0], info["samples"][-1]
        table = Table("prompt", f"step {first['step']}", f"step {last['step']}", title="The same eval prompts, before and after", show_lines=True)
        for before, after in list(zip(first["samples"], last["samples"]))[:limit]:
            table.add_row(before["prompt"], _answer(before), _answer(after))
        console.print(table)
    if info["seconds"]:
        table = Table("phase", "seconds", "tokens/s", title="Where the time went")
        for phase, seconds in info["seconds"].items():
            rate = next((f"{v:.0f}" for k, v in info["rates"].items() if phase.endswith(k)), "")
            table.add_row(phase, f"{seconds:.1f}", rate)
        console.print(table)
    if info.get("plot"):
        console.print(f"plot: {info['plot']}")


def _answer(row: dict[str, Any]) -> str:
    scored = f" [{row['reward']:.3g}]" if isinstance(row.get("reward"), (int, float)) else ""
    return f"{row['output']}{scored}"


def plot(info: dict[str, Any], path: str | Path) -> Path:
    """reward, KL and losses over steps, one panel each, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no screen needed
    import matplotlib.pyplot as plt

    records = read_metrics(info["logs"])
    panels = [
        ("eval " + (info.get("score") or "reward"), "eval", [info.get("score")] if info.get("score") else []),
        ("rollout score", "rollout", ["rollout_scores/mean"]),
        ("KL (sqrt) and KL coefficient", "rollout", ["policy/sqrt_kl", "kl_ctl_value"]),
        ("losses", "train", ["losses/total_loss", "losses/policy_loss", "losses/value_loss", "losses/loss", "loss"]),
    ]
    figure, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, (title, kind, keys) in zip(axes.flat, panels):
        drawn = False
        for key in keys:
            points = [(r["step"], r[key]) for r in records if r["kind"] == kind and isinstance(r.get(key), (int, float))]
            if points:
                ax.plot(*zip(*points), marker="o" if kind != "train" else None, markersize=3, label=key)
                drawn = True
        ax.set_title(title)
        ax.set_xlabel("step")
        if drawn:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "not logged by this method", ha="center", va="center", transform=ax.transAxes)
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def report(run_dir: str | Path, console: Console | None = None) -> dict[str, Any]:
    """Print the report of a run and write ``report.png`` beside its logs."""
    info = summary(run_dir)
    info["plot"] = plot(info, info["logs"].parent / "report.png")
    print_report(info, console)
    return info
