"""Optimizers and schedulers built from trlX's names (``rlkit_methods.common.optim``)."""

from __future__ import annotations

import inspect
from typing import Any, Iterable

import torch

from rlkit_core.errors import ConfigError
from rlkit_methods.engine_kit import get_optimizer_class, get_scheduler_class

FUSED = ("adam", "adamw")  # torch has fused kernels for these on CPU and CUDA


def make_optimizer(name: str, kwargs: dict[str, Any], parameters: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    key = str(name).lower()
    try:
        optimizer_class = get_optimizer_class(key)
    except (ValueError, ImportError) as exc:
        raise ConfigError(str(exc)) from None
    params = [p for p in parameters if p.requires_grad]
    kwargs = dict(kwargs)
    if key in FUSED and all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params):
        # one kernel over all parameters instead of a loop over them: ~5x faster steps on CPU
        # here (docs/benchmarks.md), equal to the loop to float tolerance; ``fused: false`` opts out
        kwargs.setdefault("fused", True)
    try:
        return optimizer_class(params, **kwargs)
    except TypeError as exc:
        raise ConfigError(f"optimizer.kwargs: {exc}") from None


def make_scheduler(name: str, kwargs: dict[str, Any], optimizer: torch.optim.Optimizer, total_steps: int | None = None):
    """``total_steps`` is the warmup schedules' ``num_training_steps`` unless kwargs give it."""
    try:
        scheduler_class = get_scheduler_class(name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if total_steps is not None and "num_training_steps" in inspect.signature(scheduler_class).parameters:
        kwargs = {"num_training_steps": total_steps, **kwargs}
    try:
        return scheduler_class(optimizer, **kwargs)
    except TypeError as exc:
        raise ConfigError(f"scheduler.kwargs: {exc}") from None
