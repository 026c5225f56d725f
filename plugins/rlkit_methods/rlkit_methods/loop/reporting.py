"""What a person sees while training: a progress bar and tables of samples (stderr, main
process only, and the bar only on a terminal)."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any, Iterator

from rich.console import Console
from rich.table import Table

console = Console(stderr=True)


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def print_samples(rows: list[dict[str, Any]], *, title: str, stats: dict[str, Any], limit: int = 4) -> None:
    if not rows:
        return
    summary = " ".join(f"{k}: {_fmt(v)}" for k, v in stats.items() if k.startswith(("reward", "metrics")))
    table = Table(*rows[0].keys(), title=f"{title} {summary}".strip(), show_lines=True)
    for row in rows[:limit]:
        table.add_row(*(_fmt(v) for v in row.values()))
    console.print(table)


class _Bar:
    """Step count, the phase (train, rollout, eval) and the latest reward and loss."""

    def __init__(self, progress, task) -> None:
        self.progress, self.task = progress, task
        self.latest: dict[str, str] = {}

    def update(self, step: int, stats: dict[str, Any]) -> None:
        for key in ("reward/mean", "losses/total_loss", "losses/loss", "loss"):
            if key in stats:
                self.latest["reward" if key == "reward/mean" else key.split("/")[-1]] = _fmt(stats[key])
        self.show_phase("train", step)

    def show_phase(self, phase: str, step: int | None = None) -> None:
        if self.progress is None:
            return
        text = " | ".join([phase] + [f"{k} {v}" for k, v in self.latest.items()])
        self.progress.update(self.task, description=text, **({"completed": step} if step is not None else {}))


@contextmanager
def progress(total: int, completed: int, *, enabled: bool) -> Iterator[_Bar]:
    if not (enabled and sys.stderr.isatty()):
        yield _Bar(None, None)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("training", total=total, completed=completed)
        yield _Bar(bar, task)
