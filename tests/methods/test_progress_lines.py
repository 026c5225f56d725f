"""Progress off a terminal: plain lines on stderr with step, phase, reward, losses and ETA, at
each rollout phase, every N steps at most, and at least every minute."""

import io
import re
import time

from rlkit_methods.run import console as reporting
from rlkit_methods.run.console import _Lines, progress


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def lines_of(stream):
    return [line for line in stream.getvalue().splitlines() if line]


def test_off_a_terminal_progress_prints_plain_lines(capsys):
    with progress(4, 0, enabled=True) as bar:
        bar.show_phase("rollout")
        for step in range(1, 5):
            bar.update(step, {"reward/mean": 0.25, "losses/total_loss": 1.5, "losses/value_loss": 0.5, "policy/sqrt_kl": 2.0})
    err = capsys.readouterr().err
    assert "\x1b[" not in err  # no terminal control codes in a log file
    lines = err.splitlines()
    assert lines[0].startswith("progress: step 0/4 (0%) | start")
    assert lines[1].startswith("progress: step 0/4 (0%) | rollout")
    last = lines[-1]
    assert last.startswith("progress: step 4/4 (100%) | train | reward 0.25 | total_loss 1.5 | value_loss 0.5 | elapsed ")
    assert last.endswith("ETA 0:00") and "sqrt_kl" not in last


def test_the_evaluation_before_the_first_step_is_shown_from_the_first_line(capsys):
    """Evaluation 0 runs before the progress display starts: its reward is on every line until
    the next evaluation (the main job's first 40 steps showed no reward)."""
    with progress(4, 0, enabled=True, stats={"reward/mean": 0.09314, "time/evaluate": 3.0}) as bar:
        bar.show_phase("rollout")
        bar.update(4, {"losses/total_loss": 1.5})
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("progress: step 0/4 (0%) | start | reward 0.09314 | elapsed ")
    assert lines[1].startswith("progress: step 0/4 (0%) | rollout | reward 0.09314 | elapsed ")
    assert lines[-1].startswith("progress: step 4/4 (100%) | train | reward 0.09314 | total_loss 1.5 | elapsed ")
    assert "time" not in lines[0].split("elapsed")[0]


def test_remember_keeps_values_without_printing():
    out, clock = io.StringIO(), FakeClock()
    lines = _Lines(10, 0, every_steps=1, stream=out, clock=clock)
    lines.remember({"reward/mean": 0.5, "losses/loss": 2.0})
    assert out.getvalue() == ""
    lines.update(1, {})
    assert lines_of(out) == ["progress: step 1/10 (10%) | train | reward 0.5 | loss 2 | elapsed 0:00 | ETA 0:00"]


def test_other_processes_print_nothing(capsys):
    with progress(4, 0, enabled=False) as bar:
        bar.show_phase("rollout")
        bar.update(1, {"reward/mean": 1.0})
    assert capsys.readouterr().err == ""


def test_lines_are_rate_limited_by_steps_and_every_rollout_phase_is_shown():
    out, clock = io.StringIO(), FakeClock()
    lines = _Lines(100, 0, every_steps=10, every_seconds=60, stream=out, clock=clock)
    for step in range(1, 61):
        clock.now += 1.0
        if step % 25 == 1:
            lines.show_phase("rollout", step - 1)
        lines.update(step, {"reward/mean": step / 100})
    printed = lines_of(out)
    steps = [int(re.search(r"step (\d+)/", line).group(1)) for line in printed]
    phases = [line.split(" | ")[1] for line in printed]
    assert [s for s, p in zip(steps, phases) if p == "rollout"] == [0, 25, 50]
    # a train line comes N steps after the line before it, whatever that was
    assert [s for s, p in zip(steps, phases) if p == "train"] == [10, 20, 35, 45, 60]


def test_eta_follows_the_rate_since_start_and_resume():
    out, clock = io.StringIO(), FakeClock()
    lines = _Lines(100, 40, every_steps=1, stream=out, clock=clock)  # resumed at step 40
    clock.now += 30.0
    lines.update(50, {"losses/loss": 0.1})  # 10 steps in 30 s: 50 left take 150 s
    assert lines_of(out)[-1] == "progress: step 50/100 (50%) | train | loss 0.1 | elapsed 0:30 | ETA 2:30"


def test_a_slow_step_still_prints_after_every_seconds():
    out, clock = io.StringIO(), FakeClock()
    lines = _Lines(1000, 0, every_steps=500, every_seconds=60, stream=out, clock=clock)
    lines.update(1, {})
    assert lines_of(out) == []
    clock.now += 61
    lines.update(2, {})
    assert len(lines_of(out)) == 1 and "step 2/1000" in lines_of(out)[0]


def test_a_long_phase_gets_a_line_from_the_timer(monkeypatch):
    """Generation can take minutes without a step: the timer writes the current state."""
    out = io.StringIO()
    lines = _Lines(10, 0, every_steps=5, every_seconds=0.05, stream=out).start()
    try:
        lines.show_phase("rollout")
        deadline = time.monotonic() + 10
        while sum("| rollout |" in line for line in lines_of(out)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        lines.stop()
    assert sum("| rollout |" in line for line in lines_of(out)) >= 2
    assert not lines.timer.is_alive()


def test_a_terminal_gets_the_rich_bar(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(reporting.sys, "stderr", Tty())
    with progress(3, 0, enabled=True) as bar:
        assert isinstance(bar, reporting._Bar) and bar.progress is not None
        bar.update(1, {"reward/mean": 0.5})
        assert bar.progress.tasks[0].completed == 1


def test_the_terminal_bar_shows_rate_and_eta(monkeypatch):
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    monkeypatch.setattr(reporting.sys, "stderr", tty)
    monkeypatch.setattr(reporting, "console", reporting.Console(file=tty, force_terminal=True, width=160))
    with progress(3, 0, enabled=True) as bar:
        for step in (1, 2):
            bar.update(step, {"reward/mean": 0.5})
        bar.progress.refresh()
    shown = tty.getvalue()
    assert "ETA" in shown and re.search(r"\d+\.\d+ (steps/s|s/step)|\? steps/s", shown), shown
    assert reporting._rate(4.0) == "4.00 steps/s" and reporting._rate(0.25) == "4.0 s/step"


def test_phases_before_learn_get_a_log_line_each():
    import logging

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("rlkit_methods.run.console")
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    try:
        reporting.BeforeLearn(True).show_phase("rollout")
        reporting.BeforeLearn(True).show_phase("eval", 0)
        reporting.BeforeLearn(False).show_phase("eval", 0)  # other processes say nothing
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    assert [r.getMessage() for r in records] == ["making rollouts (generate, then score) ...",
                                                 "evaluating the eval prompts at step 0 ..."]
