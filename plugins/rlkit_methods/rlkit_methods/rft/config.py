"""``RFTConfig``: trlX's rejection-sampling fine-tuning section (torch-free module)."""

from __future__ import annotations

from typing import Any

import attrs

from rlkit_core.config import MethodConfig, TRLConfig, in_closed_interval, positive

from rlkit_methods.common.defaults import number as _number
from rlkit_methods.common.defaults import trlx_default_config


@attrs.define
class RFTConfig(MethodConfig):
    """Rejection-sampling fine-tuning (trlX's fields and defaults).

    Every ``n_improve_steps`` epochs (a growth step) each prompt gets
    ``n_generations_per_prompt`` new samples, scored by the reward function and pooled with
    the earlier ones. Each epoch keeps, per prompt, the samples scoring at least the prompt's
    score percentile, which rises linearly from ``start_percentile`` to ``end_percentile``
    over the improve steps, and fine-tunes on them (cross-entropy on the outputs).

    :param gen_kwargs: generation kwargs (required, as in trlX)
    :param start_percentile: percentile of the threshold at the first improve step, in [0, 1]
    :param end_percentile: percentile at the last improve step, in [start_percentile, 1]
    :param n_improve_steps: epochs per growth step
    :param n_generations_per_prompt: samples per prompt per growth step
    """

    gen_kwargs: dict[str, Any] = attrs.field(kw_only=True)
    name: str = "RFTConfig"
    start_percentile: float = attrs.field(default=0.7, validator=_number(in_closed_interval(0, 1)))
    end_percentile: float = attrs.field(default=0.95, validator=_number(in_closed_interval(0, 1)))
    n_improve_steps: int = attrs.field(default=4, validator=positive)
    n_generations_per_prompt: int = attrs.field(default=32, validator=positive)

    def __attrs_post_init__(self) -> None:
        if attrs.validators.get_disabled():
            return  # structuring: collect_errors runs this after the field checks
        if self.end_percentile < self.start_percentile:
            raise ValueError(
                f"end_percentile: must be >= start_percentile ({self.start_percentile}), got {self.end_percentile}"
            )

    def percentile(self, epoch: int) -> float:
        """The threshold percentile of this epoch (see :func:`rlkit_methods.rft.selection.percentile_at`)."""
        from rlkit_methods.rft.selection import percentile_at

        return percentile_at(epoch, self.start_percentile, self.end_percentile, self.n_improve_steps)


def default_rft_config() -> TRLConfig:
    """trlX's ``rft_sentiments`` settings as a default (model: the offline SmolLM2-135M source)."""
    return trlx_default_config(
        RFTConfig(
            name="RFTConfig", n_generations_per_prompt=4, start_percentile=0.9, end_percentile=0.95, n_improve_steps=1,
            gen_kwargs=dict(max_new_tokens=40, top_k=0, top_p=1.0, temperature=1.0, do_sample=True),
        ),
        trainer="AccelerateRFTTrainer", seq_length=1024, batch_size=32, total_steps=1000,
        checkpoint_interval=10000, lr=3e-5,
    )
