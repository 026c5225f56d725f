"""What a person sees while training, on stderr and from the main process only: tables of
samples, and progress: a bar on a terminal, plain lines elsewhere (a log file, CI)."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from rich.console import Console
from rich.markup import escape
from rich.table import Table

console = Console(stderr=True)
log = logging.getLogger(__name__)


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def print_samples(rows: list[dict[str, Any]], *, title: str, stats: dict[str, Any], limit: int = 4) -> None:
    if not rows:
        return
    summary = " ".join(f"{k}: {_fmt(v)}" for k, v in stats.items() if k.startswith(("reward", "metrics")))
    table = Table(*rows[0].keys(), title=f"{title} {summary}".strip(), show_lines=True)
    for row in rows[:limit]:
        table.add_row(*(escape(_fmt(v)) for v in row.values()))  # a model's "[b]" is text, not markup
    console.print(table)


class _Bar:
    """Step count, the phase (train, rollout, eval) and the latest reward and loss."""

    def __init__(self, progress, task) -> None:
        self.progress, self.task = progress, task
        self.latest: dict[str, str] = {}

    def remember(self, stats: dict[str, Any]) -> None:
        """Keep the latest reward and loss to show, without redrawing."""
        for key in ("reward/mean", "losses/total_loss", "losses/loss", "loss"):
            if key in stats:
                self.latest["reward" if key == "reward/mean" else key.split("/")[-1]] = _fmt(stats[key])

    def update(self, step: int, stats: dict[str, Any]) -> None:
        self.remember(stats)
        self.show_phase("train", step)

    def show_phase(self, phase: str, step: int | None = None) -> None:
        if self.progress is None:
            return
        text = " | ".join([phase] + [f"{k} {v}" for k, v in self.latest.items()])
        self.progress.update(self.task, description=text, **({"completed": step} if step is not None else {}))


class BeforeLearn:
    """The phases before ``learn`` opens the progress display (the first rollouts, evaluation
    0): one log line as each starts, so a first run is not silent for minutes. Same methods as
    the bar; only ``show_phase`` says anything."""

    PHASES = {"rollout": "making rollouts (generate, then score)", "eval": "evaluating the eval prompts"}

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def remember(self, stats: dict[str, Any]) -> None:
        pass

    def update(self, step: int, stats: dict[str, Any]) -> None:
        pass

    def show_phase(self, phase: str, step: int | None = None) -> None:
        if self.enabled:
            at = f" at step {step}" if step is not None else ""
            log.info("%s%s ...", self.PHASES.get(phase, phase), at)


def describe_model(model_path: Any) -> str:
    """``loading the model 'smollm2-135m'``, or ``building a new gpt2 model from its config``."""
    if isinstance(model_path, (str, os.PathLike)):
        return f"loading the model {os.fspath(model_path)!r}"
    kind = model_path.get("model_type") if isinstance(model_path, dict) else getattr(model_path, "model_type", None)
    return f"building a new {kind or type(model_path).__name__} model from its config"


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class _Lines:
    """Progress off a terminal: one plain line on stderr at each rollout phase and evaluation,
    every ``every_steps`` steps at most, and at least every ``every_seconds`` (a background
    timer writes the current state when a long phase, e.g. generation, prints nothing).

    ``progress: step 16/120 (13%) | train | reward 0.31 | total_loss 0.52 | elapsed 1:02 | ETA 6:44``
    """

    def __init__(self, total: int, completed: int, *, every_steps: int | None = None, every_seconds: float = 60.0,
                 stream=None, clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.start_step, self.step = total, completed, completed
        self.every_steps = every_steps or max(1, total // 20)
        self.every_seconds = every_seconds
        self.stream, self.clock = stream, clock
        self.phase = "start"
        self.latest: dict[str, str] = {}
        self.started = self.last_time = clock()
        self.last_step = completed
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.timer: threading.Thread | None = None

    def remember(self, stats: dict[str, Any]) -> None:
        """Keep the latest reward and losses for the next line, without printing one."""
        for key, value in stats.items():
            if key == "reward/mean":
                self.latest["reward"] = _fmt(value)
            elif key.startswith("losses/") or key == "loss":
                self.latest[key.split("/")[-1]] = _fmt(value)

    def update(self, step: int, stats: dict[str, Any]) -> None:
        self.remember(stats)
        self.step, self.phase = step, "train"
        if step - self.last_step >= self.every_steps or step >= self.total or self._quiet_for() >= self.every_seconds:
            self.write()

    def show_phase(self, phase: str, step: int | None = None) -> None:
        changed = phase != self.phase
        self.phase = phase
        if step is not None:
            self.step = step
        if changed and phase != "train":  # every rollout phase and evaluation
            self.write()

    def line(self) -> str:
        done = self.step - self.start_step
        elapsed = self.clock() - self.started
        eta = _clock(elapsed / done * (self.total - self.step)) if done > 0 else "?"
        percent = 100 * self.step // max(self.total, 1)
        fields = [f"step {self.step}/{self.total} ({percent}%)", self.phase]
        fields += [f"{k} {v}" for k, v in self.latest.items()]
        fields += [f"elapsed {_clock(elapsed)}", f"ETA {eta}"]
        return "progress: " + " | ".join(fields)

    def write(self) -> None:
        with self.lock:
            print(self.line(), file=self.stream or sys.stderr, flush=True)
            self.last_time, self.last_step = self.clock(), self.step

    def _quiet_for(self) -> float:
        return self.clock() - self.last_time

    def _heartbeat(self) -> None:
        while not self.stopped.wait(max(self.every_seconds - self._quiet_for(), 0.01)):
            if self._quiet_for() >= self.every_seconds:
                self.write()

    def start(self) -> "_Lines":
        self.write()
        self.timer = threading.Thread(target=self._heartbeat, name="rlkit-progress", daemon=True)
        self.timer.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        if self.timer is not None:
            self.timer.join()


@contextmanager
def progress(total: int, completed: int, *, enabled: bool, stats: dict[str, Any] | None = None) -> Iterator[_Bar | _Lines]:
    """The main process's progress: a rich bar on a terminal, plain lines elsewhere; nothing on
    the other processes, nor with ``RLKIT_PROGRESS=0`` (``rlkit_core.logging.disable_progress_bar``).
    Both have ``update(step, stats)``, ``remember(stats)`` and ``show_phase(phase, step=None)``;
    ``stats`` (the evaluation before the first step) is shown from the first line on."""
    if not enabled or os.environ.get("RLKIT_PROGRESS", "1") == "0":
        yield _Bar(None, None)
        return
    if not sys.stderr.isatty():
        lines = _Lines(total, completed)
        lines.remember(stats or {})
        lines.start()
        try:
            yield lines
        finally:
            lines.stop()
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), _rate_column(), TimeElapsedColumn(),
               TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("training", total=total, completed=completed)
        shown = _Bar(bar, task)
        shown.remember(stats or {})
        shown.show_phase("start")
        yield shown


def _rate(speed: float | None) -> str:
    """Steps per second, or seconds per step when a step takes longer than one."""
    if not speed:
        return "? steps/s"
    return f"{speed:.2f} steps/s" if speed >= 1 else f"{1 / speed:.1f} s/step"


def _rate_column():
    from rich.progress import ProgressColumn
    from rich.text import Text

    class RateColumn(ProgressColumn):
        def render(self, task) -> Text:
            return Text(_rate(task.speed))

    return RateColumn()
