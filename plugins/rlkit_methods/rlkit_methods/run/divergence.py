"""Stop a diverging run at its first non-finite loss or gradient norm (``train.stop_on_nonfinite``,
on by default). Training on with NaN weights only fails later and elsewhere (sampling raises
``probability tensor contains either inf, nan``) and overwrites good checkpoints with NaN
ones; stopping at once keeps the last finite checkpoint and names the step and the quantity."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from rlkit_core.errors import RlkitError


class Diverged(RlkitError):
    """A loss or gradient norm became NaN or infinite."""


def watched(key: str) -> bool:
    """Losses and gradient norms (not rewards or metrics, which may be NaN for other reasons)."""
    name = key.rsplit("/", 1)[-1]
    return key.startswith(("loss", "losses/")) or name.startswith("loss") or "grad_norm" in key


def first_nonfinite(stats: dict[str, Any]) -> tuple[str, float] | None:
    for key, value in stats.items():
        if watched(key) and isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isfinite(value):
            return key, float(value)
    return None


def check_finite(stats: dict[str, Any], step: int, *, enabled: bool, last_checkpoint: Path | None) -> None:
    """Raise :class:`Diverged` in one line if a watched value of ``stats`` is not finite."""
    found = first_nonfinite(stats) if enabled else None
    if found is None:
        return
    raise Diverged(diverged_message(step, *found, last_checkpoint))


def diverged_message(step: int, key: str, value: float, last_checkpoint: Path | None) -> str:
    kept = (f"the last finite checkpoint is {last_checkpoint} (resume from it with a lower lr)" if last_checkpoint
            else f"no checkpoint before step {step - 1} was saved (the weights after step {step - 1} gave it)")
    return (f"step {step}: {key} is {value} (the run diverged); stopped, {kept}; "
            f"train.stop_on_nonfinite=false trains on")


def stop_if_diverged(trainer: Any, stats: dict[str, Any]) -> None:
    """The loop's check after each step: the first NaN/inf loss or gradient norm on any rank
    stops every rank before the step is checkpointed, so the last checkpoint on disk stays the
    last finite one; the step's record is written first, for the report."""
    from rlkit_methods.run.checkpoint import complete_checkpoints

    if not trainer.config.train.stop_on_nonfinite:
        return
    found = first_nonfinite(stats)
    if float(trainer.engine.all_reduce_sum(torch.tensor([float(found is not None)]))[0]) == 0:
        return
    trainer.metrics_log.write(trainer.iter_count, "train", stats)
    key, value = found or ("loss on another process", math.nan)
    # step N's loss is computed with the weights after step N - 1: checkpoint N - 1 holds the
    # weights that gave the non-finite value, so the last finite one is at most N - 2
    step = trainer.iter_count
    kept = max(((s, p) for s, p in complete_checkpoints(trainer.checkpoint_dir) if s <= step - 2), default=None)
    raise Diverged(diverged_message(step, key, value, kept[1] if kept else None))
