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
import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rlkit_core.errors import RlkitError
from rlkit_methods.run.metrics_log import METRICS_FILE, SAMPLES_FILE, read_metrics

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


def summary(run_dir: str | Path, *, checkpoint_dir: str | Path | None = None) -> dict[str, Any]:
    logs = logs_dir(run_dir)
    records = read_metrics(logs)
    for number, record in enumerate(records, 1):  # what rlkit's log writes; anything else is another file
        if not isinstance(record.get("kind"), str) or not _is_number(record.get("time")) or not _is_number(record.get("step")):
            missing = [k for k in ("step", "kind", "time") if k not in record] or ["a valid step, kind or time"]
            raise RlkitError(f"{logs / METRICS_FILE}: record {number} has no {', '.join(missing)}; not a log rlkit wrote "
                             f"(rlkit report reads the metrics.jsonl of a run)")
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
    out["run"] = Path(checkpoint_dir) if checkpoint_dir is not None else run_folder(logs)
    out["config"] = run_config(out["run"])
    ppo_epochs = (out["config"].get("method") or {}).get("ppo_epochs")
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


# (title, record kind, keys, y label): the panels a run may have; a panel none of whose keys
# was logged is left out. Each panel holds one quantity on one scale.
PANELS = [
    ("rollout score", "rollout", ["rollout_scores/mean"], "mean score of the rollouts"),
    ("KL to the reference", "rollout", ["policy/sqrt_kl"], "sqrt(KL)"),
    ("losses", "train", ["losses/total_loss", "losses/policy_loss", "losses/value_loss", "losses/loss", "loss"], "loss"),
]
TWINS = {"policy/sqrt_kl": ("kl_ctl_value", "KL coefficient")}  # its own axis, on the right


def run_folder(logs: Path, checkpoint_dir: str | Path | None = None) -> Path:
    """Where a run's report goes: the checkpoint_dir when the logs are its default
    ``<checkpoint_dir>/logs``, else ``train.logging_dir`` itself. Without the checkpoint_dir
    (``rlkit report FOLDER``), a logs folder named ``logs`` stands for the default."""
    if checkpoint_dir is not None:
        checkpoint_dir = Path(checkpoint_dir)
        return checkpoint_dir if Path(logs).resolve() == (checkpoint_dir / "logs").resolve() else Path(logs)
    return logs.parent if logs.name == "logs" else logs


def run_name(info: dict[str, Any]) -> str:
    """``train.run_name`` when the run set one, else its checkpoint_dir's name when known, else
    its report folder's."""
    name = ((info.get("config") or {}).get("train") or {}).get("run_name")
    return str(name) if name else Path(info.get("run") or run_folder(info["logs"])).resolve().name


def eval_panels(scores: list[str]) -> list[tuple[str, str, list[str], str]]:
    """One panel per eval score; the values of a swept setting (``@beta=0``, ``@beta=1``) share it."""
    groups: dict[str, list[str]] = {}
    for key in scores:
        groups.setdefault(SWEPT.sub("", key), []).append(key)
    return [(f"eval {name.split('/')[-1] if name.startswith('metrics/') else 'reward'}", "eval", keys, name)
            for name, keys in groups.items()]


def _series(records: list[dict[str, Any]], kind: str, key: str) -> tuple[list[tuple[int, float]], int]:
    """(step, value) of ``key`` in records of ``kind`` that a plot can show, and how many it
    cannot: nan, inf, and values so large that matplotlib's axis arithmetic overflows (1e308)."""
    values = [(r["step"], r[key]) for r in records if r["kind"] == kind and _is_number(r.get(key))]
    points = [(step, v) for step, v in values if math.isfinite(v) and abs(v) <= DRAWABLE]
    return points, len(values) - len(points)


def _draw(ax, records, kind: str, keys: list[str], color_offset: int = 0) -> int:
    """Plot the logged ``keys``; colours follow the drawn lines. Returns how many were drawn."""
    drawn = 0
    for key in keys:
        points, skipped = _series(records, kind, key)
        label = f"{key} ({skipped} nan/inf/huge not drawn)" if skipped else key
        if points or skipped:
            ax.plot(*(zip(*points) if points else ([], [])), marker="o" if kind != "train" else None, markersize=3,
                    label=label, color=f"C{drawn + color_offset}")
            drawn += 1
    return drawn


def plot(info: dict[str, Any], path: str | Path) -> Path:
    """Write :func:`figure` as a PNG."""
    import matplotlib.pyplot as plt

    fig = figure(info)
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        plt.close(fig)
        raise IsADirectoryError(f"{path} is a folder")
    # written beside it, then renamed over it: a report.png that is a symbolic link is replaced,
    # never written through (the file it points to is not the run's)
    draft = path.with_name(f".{path.name}.{os.getpid()}.png")
    try:
        fig.savefig(draft, dpi=100)
        os.replace(draft, path)
    finally:
        plt.close(fig)
        draft.unlink(missing_ok=True)
    return path


def figure(info: dict[str, Any]):
    """The run over optimizer steps: eval scores, rollout score, KL (with the KL coefficient
    on its own axis) and losses, one labelled panel per quantity, titled with the run."""
    import matplotlib

    matplotlib.use("Agg")  # no screen needed
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    records = read_metrics(info["logs"])
    panels = [panel for panel in eval_panels(list(info.get("scores", {}))) + PANELS
              if any(_series(records, panel[1], key) != ([], 0) for key in panel[2])]
    rows = max(1, math.ceil(len(panels) / 2))
    fig, axes = plt.subplots(rows, 2, figsize=(11, 3.6 * rows), squeeze=False)
    for ax, (title, kind, keys, ylabel) in zip(axes.flat, panels):
        drawn = _draw(ax, records, kind, keys)
        handles, labels = ax.get_legend_handles_labels()
        twin = TWINS.get(keys[0])
        if twin and any(_series(records, kind, twin[0])[0]):
            right = ax.twinx()
            _draw(right, records, kind, [twin[0]], color_offset=drawn)
            right.set_ylabel(twin[1])
            more = right.get_legend_handles_labels()
            handles, labels = handles + more[0], labels + more[1]
        ax.set_title(title)
        ax.set_xlabel("optimizer step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(handles, labels, fontsize=8)
    for ax in list(axes.flat)[len(panels):]:
        fig.delaxes(ax)  # an odd number of panels leaves one cell empty: no empty frame
    if not panels:
        fig.text(0.5, 0.5, "nothing logged yet", ha="center", va="center")
    fig.suptitle(_title(info))
    fig.tight_layout()
    return fig


def _title(info: dict[str, Any]) -> str:
    if "score" not in info:
        return f"{run_name(info)}: {info['steps']} steps"
    return f"{run_name(info)}: {info['score']} {_fmt(info['before'], '.3f')} -> {_fmt(info['after'], '.3f')} in {info['steps']} steps"


def report(run_dir: str | Path, console: Console | None = None, *, checkpoint_dir: str | Path | None = None,
           plot_to: str | Path | None = None) -> dict[str, Any]:
    """Print the report of a run and write ``report.png`` into its folder (:func:`run_folder`),
    or to ``plot_to``; the end of a run passes its ``checkpoint_dir``, where its config is."""
    info = summary(run_dir, checkpoint_dir=checkpoint_dir)
    try:
        info["plot"] = plot(info, Path(plot_to) if plot_to else run_folder(info["logs"], checkpoint_dir) / "report.png")
    except (ValueError, OverflowError, OSError) as exc:  # the text report matters more than the picture
        info["plot"] = f"not drawn ({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''})"
    print_report(info, console)
    return info
