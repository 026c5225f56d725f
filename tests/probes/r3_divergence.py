"""Round 3, divergence: the first non-finite loss or gradient norm stops the run in one line
naming the step and the quantity, and the last finite checkpoint is kept."""

from __future__ import annotations

import math
from pathlib import Path

from r3_common import SFT, check, raises, validate


def stop_check(stats, step=3, enabled=True):
    def call():
        from rlkit_methods.run import divergence

        divergence.check_finite(stats, step, enabled=enabled, last_checkpoint=Path("ckpts/checkpoint_2"))
    return call


def cases(tmp: Path) -> list[tuple[str, object]]:
    probes: list[tuple[str, object]] = []

    def add(name, probe):
        probes.append((name, probe))

    def missing(fn, expect):
        def probe():
            try:
                __import__("rlkit_methods.run.divergence")
            except ImportError:
                return "unclear", "no divergence stop: non-finite losses train on, then sampling fails"
            return raises(fn, expect)()
        return probe

    for key, value in [("loss", math.nan), ("loss", math.inf), ("losses/total_loss", -math.inf), ("grad_norm", math.nan),
                       ("policy/grad_norm", math.inf), ("losses/loss_q", math.nan)]:
        add(f"{key} = {value} at step 3", missing(stop_check({key: value, "lr": 1e-3}), f"step 3: {key}"))
    add("the line names the checkpoint kept", missing(stop_check({"loss": math.nan}), "checkpoint_2"))

    def fine(stats, enabled=True):
        def probe():
            try:
                stop_check(stats, enabled=enabled)()
            except ImportError:
                return "unclear", "no divergence stop"
        return check(probe)

    add("finite losses go on", fine({"loss": 1.0, "grad_norm": 3.0}))
    add("a NaN reward mean is not a divergence", fine({"loss": 1.0, "reward/mean": math.nan}))
    add("train.stop_on_nonfinite=false goes on", fine({"loss": math.nan}, enabled=False))
    def switch_known():
        from probe_bad_inputs import cli

        code, lines = cli(validate(SFT, "train.stop_on_nonfinite=false"))
        return None if code == 0 else ("unclear", " ".join(lines)[:200])
    add("validate knows train.stop_on_nonfinite", check(switch_known))
    return probes
