"""trlX's optimizer and scheduler names (``optimizer.name``, ``scheduler.name``) and the
torch classes they stand for.

The enums hold trlX's names plus the few rlkit adds (``rmsprop``; ``constant``, ``step``,
``exponential``). Lookups are case-insensitive and take an enum member or its string; torch
(and bitsandbytes for the 8-bit optimizers) is imported only when a class is asked for.
"""

from __future__ import annotations

from enum import Enum
from typing import Any


class OptimizerName(str, Enum):
    """Supported optimizer names."""

    ADAM = "adam"
    ADAMW = "adamw"
    ADAM_8BIT_BNB = "adam_8bit_bnb"
    ADAMW_8BIT_BNB = "adamw_8bit_bnb"
    SGD = "sgd"
    RMSPROP = "rmsprop"  # rlkit addition


class SchedulerName(str, Enum):
    """Supported learning-rate scheduler names."""

    COSINE_ANNEALING = "cosine_annealing"
    LINEAR = "linear"
    CONSTANT = "constant"  # rlkit additions from here on
    STEP = "step"
    EXPONENTIAL = "exponential"
    # warmup, as transformers' get_*_schedule_with_warmup (kwargs num_warmup_steps, and
    # num_training_steps: train.total_steps unless given)
    LINEAR_WITH_WARMUP = "linear_with_warmup"
    COSINE_WITH_WARMUP = "cosine_with_warmup"
    CONSTANT_WITH_WARMUP = "constant_with_warmup"


def _member(enum: type[Enum], name: Any, what: str) -> Enum:
    key = name.value if isinstance(name, Enum) else str(name).lower()
    try:
        return enum(key)
    except ValueError:
        supported = ", ".join(m.value for m in enum)
        raise ValueError(f"{what}.name: unknown {what} {name!r}; choose one of {supported}") from None


def get_optimizer_class(name: OptimizerName | str) -> type:
    """The optimizer class for ``name`` (trlX's ``get_optimizer_class``)."""
    member = _member(OptimizerName, name, "optimizer")
    if member in (OptimizerName.ADAM_8BIT_BNB, OptimizerName.ADAMW_8BIT_BNB):
        try:
            from bitsandbytes import optim as bnb_optim
        except ImportError:
            raise ImportError(f"optimizer.name: {member.value} needs bitsandbytes; pip install bitsandbytes") from None
        return bnb_optim.Adam8bit if member is OptimizerName.ADAM_8BIT_BNB else bnb_optim.AdamW8bit
    import torch

    return {
        OptimizerName.ADAM: torch.optim.Adam,
        OptimizerName.ADAMW: torch.optim.AdamW,
        OptimizerName.SGD: torch.optim.SGD,
        OptimizerName.RMSPROP: torch.optim.RMSprop,
    }[member]


def get_scheduler_class(name: SchedulerName | str) -> type:
    """The learning-rate scheduler class for ``name`` (trlX's ``get_scheduler_class``); the
    warmup names give transformers' schedule function, called the same way (optimizer, kwargs)."""
    member = _member(SchedulerName, name, "scheduler")
    if member.value.endswith("_with_warmup"):
        import transformers

        return getattr(transformers, f"get_{member.value.removesuffix('_with_warmup')}_schedule_with_warmup")
    from torch.optim import lr_scheduler

    return {
        SchedulerName.COSINE_ANNEALING: lr_scheduler.CosineAnnealingLR,
        SchedulerName.LINEAR: lr_scheduler.LinearLR,
        SchedulerName.CONSTANT: lr_scheduler.ConstantLR,
        SchedulerName.STEP: lr_scheduler.StepLR,
        SchedulerName.EXPONENTIAL: lr_scheduler.ExponentialLR,
    }[member]
