"""The end-of-run report: what changed, how fast, and a plot.

Read from a run's ``logs/metrics.jsonl`` and ``logs/samples.jsonl``: the eval reward (or
metric, per swept generation setting) before and after, the same eval prompts answered at
the first and the last evaluation, where the time went per phase (with tokens/s), and
``report.png`` with reward, KL and losses over steps. ``rlkit report RUN_DIR`` prints it again.

NaN and infinite values (a reward of 1e308 makes an infinite standard deviation) are shown
as ``nan``/``inf`` in the text and left out of the plot, whose legend counts them.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rlkit_core.errors import RlkitError
from rlkit_methods.loop.metrics_log import METRICS_FILE, SAMPLES_FILE, read_metrics

PHASES = {
    "rollout: generate": "time/rollout_generate",
    "rollout: score": "time/rollout_score",
    "rollout: reference + value forward": "time/rollout_forward",
    "train: forward": "time/forward",
    "train: backward": "time/backward",
}
DRAWABLE = 1e100  # matplotlib's tick maths overflows on values near the float limit (1e308)
SWEPT = re.compile(r"@(?P<key>[^=]+)=(?P<value>.*)$")  # "reward/mean@beta=1"


def logs_dir(run_dir: str | Path) -> Path:
    """A run's checkpoint_dir (holding ``logs/``) or the logs folder itself."""
    run_dir = Path(run_dir)
    for candidate in (run_dir / "logs", run_dir):
        if (candidate / METRICS_FILE).is_file():
            return candidate
    raise RlkitError(f"{run_dir}: no {METRICS_FILE} here or in logs/; pass a run's checkpoint_dir")


def score_keys(evals: list[dict[str, Any]]) -> list[str]:
    """The scores the report follows: ``reward/mean`` (one per swept value), else the metrics."""
    first = evals[0]
    return [k for k in first if k.startswith("reward/mean")] or [k for k in first if k.startswith("metrics/")]


def run_config(run_dir: Path) -> dict[str, Any]:
    """The resolved config saved with the newest checkpoint, as a plain dict ({} if none)."""
    import yaml

    saved = sorted(run_dir.glob("checkpoint_*/config.yml"), key=lambda p: p.stat().st_mtime)
    if not saved:
        return {}
    try:
        return yaml.safe_load(saved[-1].read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}


def _rates(records: list[dict[str, Any]], ppo_epochs: int | None) -> dict[str, float]:
    """tokens/s per phase. Generated tokens are what scoring reads; the forward passes of a
    rollout phase see every prompt + response token, and training sees them ppo_epochs times."""
    rollouts = [r for r in records if r["kind"] == "rollout" and "tokens_per_second/generate" in r]
    if not rollouts:
        return {}
    generated = sum(r["tokens_per_second/generate"] * r["time/rollout_generate"] for r in rollouts)
    forward = sum(r.get("tokens_per_second/forward", 0.0) * r.get("time/rollout_forward", 0.0) for r in rollouts)
    seconds = {name: sum(float(r.get(key, 0.0) or 0.0) for r in rollouts) for name, key in
               (("generate", "time/rollout_generate"), ("score", "time/rollout_score"), ("forward", "time/rollout_forward"))}
    train = sum(float(r.get("time/forward", 0.0)) + float(r.get("time/backward", 0.0)) for r in records if r["kind"] == "train")
    rates = {"rollout: generate": generated / max(seconds["generate"], 1e-9)}
    if seconds["score"] > 0:
        rates["rollout: score"] = generated / seconds["score"]
    if forward and seconds["forward"] > 0:
        rates["rollout: reference + value forward"] = forward / seconds["forward"]
    if forward and ppo_epochs and train > 0:
        rates["train: forward + backward"] = forward * ppo_epochs / train
    return rates


def summary(run_dir: str | Path) -> dict[str, Any]:
    logs = logs_dir(run_dir)
    records = read_metrics(logs)
    evals = [r for r in records if r["kind"] == "eval"]
    out: dict[str, Any] = {"logs": logs, "steps": max((r["step"] for r in records), default=0), "evals": evals}
    keys = score_keys(evals) if evals else []
    out["scores"] = {k: (evals[0][k], evals[-1][k]) for k in keys if k in evals[-1]}
    if out["scores"]:
        key = next(iter(out["scores"]))
        out["score"], (out["before"], out["after"]) = key, out["scores"][key]
        swept = SWEPT.search(key)
        out["sweep"] = swept.group("key") if swept else None
    seconds: dict[str, float] = defaultdict(float)
    for record in records:
        for phase, name in PHASES.items():
            seconds[phase] += float(record.get(name, 0.0) or 0.0)
        if record["kind"] == "eval":
            seconds["evaluation"] += sum(float(v) for k, v in record.items() if k.startswith("time/generate"))
    out["seconds"] = {k: v for k, v in seconds.items() if v > 0}
    if len(records) >= 2:  # from the start of the first logged phase to the last record
        first = records[0]
        out["wall"] = records[-1]["time"] - first["time"] + sum(float(first.get(k, 0.0)) for k in PHASES.values())
    ppo_epochs = (run_config(logs.parent).get("method") or {}).get("ppo_epochs")
    out["rates"] = _rates(records, ppo_epochs if isinstance(ppo_epochs, int) else None)
    samples_path = logs / SAMPLES_FILE
    out["samples"] = read_metrics(logs, SAMPLES_FILE) if samples_path.is_file() else []
    return out


def sample_table(first: dict[str, Any], last: dict[str, Any], limit: int = 6, sweep: str | None = None) -> Table:
    """The same eval prompts at the first and the last evaluation (``limit`` per value of the
    swept generation setting ``sweep``, a column of its own)."""
    swept = [sweep] if sweep and first["samples"] and sweep in first["samples"][0] else []
    table = Table("prompt", *swept, f"step {first['step']}", f"step {last['step']}",
                  title="The same eval prompts, before and after", show_lines=True)
    shown: dict[tuple, int] = defaultdict(int)
    for before, after in zip(first["samples"], last["samples"]):
        group = tuple(str(before.get(k)) for k in swept)
        if shown[group] < limit:
            shown[group] += 1
            table.add_row(escape(str(before.get("prompt", ""))), *map(escape, group), _answer(before), _answer(after))
    return table


def print_report(info: dict[str, Any], console: Console | None = None, limit: int = 6) -> None:
    console = console or Console(stderr=True)
    wall = f" in {info['wall'] / 60:.1f} min" if info.get("wall") else ""
    for key, (before, after) in info.get("scores", {}).items():
        change = f" ({after - before:+.4g})" if _is_number(before) and _is_number(after) else ""
        console.print(f"[bold]{key}[/]: {_fmt(before)} -> {_fmt(after)}{change} over {info['steps']} steps{wall}")
    if len(info["samples"]) >= 2:
        console.print(sample_table(info["samples"][0], info["samples"][-1], limit, info.get("sweep")))
    if info["seconds"]:
        table = Table("phase", "seconds", "tokens/s", title="Where the time went")
        for phase, seconds in info["seconds"].items():
            rate = info["rates"].get(phase)
            table.add_row(phase, f"{seconds:.1f}", f"{rate:.0f}" if rate else "")
        train_rate = info["rates"].get("train: forward + backward")
        if train_rate:
            table.add_row("train: forward + backward", "", f"{train_rate:.0f}")
        console.print(table)
    if info.get("plot"):
        console.print(f"plot: {info['plot']}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fmt(value: Any, spec: str = ".4g") -> str:
    """A number as ``spec`` (nan and inf as such); anything else as text."""
    return format(value, spec) if _is_number(value) else str(value)


def _answer(row: dict[str, Any]) -> str:
    scored = f" [{row['reward']:.3g}]" if _is_number(row.get("reward")) else ""
    return escape(f"{row.get('output', '')}{scored}")  # "[nan]" or a model's "[b]" are text, not markup


def plot(info: dict[str, Any], path: str | Path) -> Path:
    """reward, KL and losses over steps, one panel each, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no screen needed
    import matplotlib.pyplot as plt

    records = read_metrics(info["logs"])
    scores = list(info.get("scores", {}))
    panels = [
        ("eval " + ("reward" if scores and scores[0].startswith("reward") else "metric"), "eval", scores),
        ("rollout score", "rollout", ["rollout_scores/mean"]),
        ("KL to the reference (sqrt)", "rollout", ["policy/sqrt_kl"]),
        ("losses", "train", ["losses/total_loss", "losses/policy_loss", "losses/value_loss", "losses/loss", "loss"]),
    ]
    figure, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, (title, kind, keys) in zip(axes.flat, panels):
        drawn = False
        for key in keys:
            values = [(r["step"], r[key]) for r in records if r["kind"] == kind and _is_number(r.get(key))]
            points = [(step, v) for step, v in values if math.isfinite(v) and abs(v) <= DRAWABLE]
            skipped = len(values) - len(points)
            label = f"{key} ({skipped} nan/inf/huge not drawn)" if skipped else key
            if points:
                ax.plot(*zip(*points), marker="o" if kind != "train" else None, markersize=3, label=label)
                drawn = True
            elif skipped:
                ax.plot([], [], label=label)
                drawn = True
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if drawn:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "not logged by this method", ha="center", va="center", transform=ax.transAxes)
    figure.suptitle(_title(info))
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _title(info: dict[str, Any]) -> str:
    if "score" not in info:
        return f"{info['logs'].parent.name}: {info['steps']} steps"
    return f"{info['logs'].parent.name}: {info['score']} {_fmt(info['before'], '.3f')} -> {_fmt(info['after'], '.3f')} in {info['steps']} steps"


def report(run_dir: str | Path, console: Console | None = None) -> dict[str, Any]:
    """Print the report of a run and write ``report.png`` beside its logs."""
    info = summary(run_dir)
    try:
        info["plot"] = plot(info, info["logs"].parent / "report.png")
    except (ValueError, OverflowError, OSError) as exc:  # the text report matters more than the picture
        info["plot"] = f"not drawn ({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})"
    print_report(info, console)
    return info
